-- Where a run's ends and pauses are posted (JSON {"url": ...}), if anywhere.
ALTER TABLE runs ADD COLUMN webhook TEXT;
