-- Rows for a small sys table, bound as ONE JSON parameter and exploded here:
-- a local relation, so no Spark job converts Python rows (several times
-- faster than createDataFrame for the coordinator's few hundred rows).
SELECT inline(from_json(:rows, :schema))
