-- Terminal runs by when they ended, for `[retention] keep_days`.
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
