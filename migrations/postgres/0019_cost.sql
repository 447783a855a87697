-- Prompt caching and cost (SPEC section 22; the same schema as SQLite's).
-- A run's input tokens read from and written to a provider's prompt cache
-- (part of `input_tokens`), and what its calls cost in US dollars: NULL
-- while unknown (its model has no price, or a call reported no usage).
ALTER TABLE runs ADD COLUMN cached_input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cost_usd DOUBLE PRECISION;
