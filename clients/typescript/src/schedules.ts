/**
 * Schedules (`/v1/schedules`): a cron in a timezone, and the run body each
 * of its ticks makes a run of; one run a tick, across the server's replicas.
 */
import type { CreateRunRequest } from "./types.js";

/** Whether each run of a schedule starts a thread, or continues the previous run. */
export type ScheduleThread = "new" | "continue";

/** What a tick does while the schedule's previous run is live. */
export type ScheduleOverlap = "skip" | "enqueue";

/** The body of `POST /v1/schedules`. */
export interface CreateScheduleRequest {
  /** Five fields (minute hour day month weekday), or six with seconds first. */
  cron: string;
  /** An IANA timezone name; absent: `UTC`. */
  timezone?: string | null;
  /** A run body, as `POST /v1/runs` takes it, without `previous_run_id` and `multitask`. */
  run: Record<string, unknown>;
  thread?: ScheduleThread | null;
  overlap?: ScheduleOverlap | null;
  enabled?: boolean | null;
  name?: string | null;
}

/** The body of `PATCH /v1/schedules/{id}`: the fields to change (`name: null` clears it). */
export interface UpdateScheduleRequest {
  cron?: string;
  timezone?: string;
  run?: Record<string, unknown>;
  thread?: ScheduleThread;
  overlap?: ScheduleOverlap;
  enabled?: boolean;
  name?: string | null;
}

/** A schedule. */
export interface Schedule {
  id: string;
  name: string | null;
  cron: string;
  timezone: string;
  /** The run body each tick makes a run of, as accepted. */
  run: Record<string, unknown>;
  thread: ScheduleThread;
  overlap: ScheduleOverlap;
  enabled: boolean;
  /** The next tick (RFC 3339); `null` while disabled. */
  next_run_at: string | null;
  /** The newest run it made; `null` before the first. */
  last_run_id: string | null;
  /** Ticks that made no run: the previous run was live (`overlap: skip`). */
  skipped_ticks: number;
  /** Ticks a limit of the tenant refused, each counted once. */
  refused_ticks: number;
  created_at: string;
  updated_at: string;
}

/** One page of schedules, in the order they were made. */
export interface ScheduleList {
  schedules: Schedule[];
  /** Pass as `cursor` for the next page; `null` on the last page. */
  next_cursor: string | null;
}

/** A run body a schedule may hold: a run request without what the schedule says. */
export type ScheduledRun = Omit<CreateRunRequest, "previous_run_id" | "multitask">;
