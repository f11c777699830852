"""The rebalance audit: PySpark jobs over `coordinator export` Parquet, a report, a generator.

- `pipeline.audit`      the audit's stages, scheduled: log + history -> audit tables (Parquet)
- `pipeline.inputs`     the export read, the one pass over every record (`pipeline.scan`),
                        input_summary
- `pipeline.group_pass` the group pass: the driver's side; `pipeline.groups` the workers'
                        batches, `pipeline.group_history` one group's history,
                        `pipeline.group_tables` the outputs' schemas
- `pipeline.offset_commits`  commit_activity: the driver's side; `pipeline.commits` the
                        workers' folds of the commits into partials
- `pipeline.invariants` the duplicate check, invariant_violations and invariants
- `pipeline.summary`    group_summary (pyarrow for a local OUT, else Spark)
- `pipeline.output`     OUT/tables written, read back and counted; `pipeline.written` the
                        tables the tasks write themselves
- `pipeline.report`     report.md (`pipeline.report_sections`) + PNG plots (`pipeline.plots`)
- `pipeline.generate`   large realistic logs: the operators' weather over simulated consumers
                        (`pipeline.simulation`) driven through the real pure state machine
- `pipeline.spark`      session settings (loopback, UI off, few shuffle partitions) and progress
"""
