-- Runs that pause for a decision (approvals and client tools): what they were
-- accepted with, and, while paused, what they wait on.

-- JSON documents of the accepted request, as the run object shows them.
ALTER TABLE runs ADD COLUMN approval TEXT NOT NULL DEFAULT '{"tools":[]}';
ALTER TABLE runs ADD COLUMN client_tools TEXT NOT NULL DEFAULT '[]';
-- The waiting batch's calls that need an answer, and the answers given so
-- far (by call id); both emptied when the run resumes.
ALTER TABLE runs ADD COLUMN pending_actions TEXT NOT NULL DEFAULT '[]';
ALTER TABLE runs ADD COLUMN answers TEXT NOT NULL DEFAULT '{}';
-- Running time used before the pause: the run's timeout counts running time.
ALTER TABLE runs ADD COLUMN running_ms BIGINT NOT NULL DEFAULT 0;
-- When the pause ends `timeout` unless answered (RFC 3339 UTC).
ALTER TABLE runs ADD COLUMN action_deadline TEXT COLLATE "C";

CREATE INDEX runs_paused ON runs (action_deadline) WHERE status = 'requires_action';
