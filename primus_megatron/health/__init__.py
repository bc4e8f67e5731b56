"""Pipeline health: what each rank records for a postmortem (`flight`), and reading it back
(`postmortem`: the wait-for graph across ranks, the root of a stopped job, its picture)."""
