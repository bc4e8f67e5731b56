"""What every CPU rank imports, imported once by the rank launcher's fork server.

`runtime.local_ranks` starts its ranks from a fork server that has imported this module:
each rank then begins with torch, megatron-core and our runtime already
imported instead of importing them again (6-9 s of CPU per rank and launch:
docs/testing.md). Only imports happen here:
nothing a rank could inherit in a state other than "just imported". Modules
whose import-time decisions a rank may want to change (a TransformerEngine
stand-in put on sys.path by a test) are imported by the rank as before.
megatron-core is optional: without it the ranks import what they need themselves.

The imported objects are then frozen out of the garbage collector (`gc.freeze`, which Python's
documentation recommends before forking without exec): otherwise a rank's first full collection walks
all ~420,000 of them (0.4 s of CPU, a tenth of a small launch's rank) and writes to every page that
holds one, copying pages the rank would have shared with the server (28,000 page faults a rank
against 9,000 frozen; docs/testing.md). Modules are never freed, so nothing collectable is kept.
"""
import gc
import warnings

with warnings.catch_warnings():
    # megatron-core's "TE/apex not installed" notices: the ranks filter them too
    warnings.simplefilter("ignore")
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    try:
        import megatron.core.distributed  # noqa: F401
        import megatron.core.models.gpt.gpt_model  # noqa: F401
        import megatron.core.optimizer  # noqa: F401
        import megatron.core.parallel_state  # noqa: F401
        import megatron.core.pipeline_parallel  # noqa: F401

        import primus_megatron.runtime.forward_backward  # noqa: F401
    except ImportError:
        pass

gc.freeze()
