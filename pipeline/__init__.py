"""The rebalance audit: PySpark jobs over `coordinator export` Parquet, a report, a generator.

- `pipeline.audit`     the Spark job: log + history -> audit tables (Parquet)
- `pipeline.report`    report.md + PNG plots from the small aggregated tables
- `pipeline.generate`  large realistic logs driven through the real pure state machine
- `pipeline.spark`     session settings (loopback, UI off, few shuffle partitions) and progress
"""
