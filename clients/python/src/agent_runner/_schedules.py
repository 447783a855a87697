"""Schedules (``/v1/schedules``): runs made on a cron, one a tick. The sync
and async clients take these methods from here."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Mapping
from typing import Any, Optional, Union

from ._base import json_object, run_of, schedule_body, schedule_of, schedule_path
from ._types import Run, Schedule, SchedulePage


def _page_params(limit: Optional[int], cursor: Optional[str]) -> dict[str, Union[str, int]]:
    given = {"limit": limit, "cursor": cursor}
    return {name: value for name, value in given.items() if value is not None}


class SchedulesMixin:
    """The schedules' methods of ``Client`` (over its ``_request``)."""

    _request: Any

    def create_schedule(
        self,
        cron: str,
        run: Mapping[str, Any],
        *,
        timezone: Optional[str] = None,
        thread: Optional[str] = None,
        overlap: Optional[str] = None,
        enabled: Optional[bool] = None,
        name: Optional[str] = None,
    ) -> Schedule:
        """Create a schedule (``POST /v1/schedules``) and return it.

        ``cron`` has five fields, or six with seconds first, in ``timezone``
        (an IANA name; the server's default ``UTC``); ``run`` is a run body as
        ``POST /v1/runs`` takes it (it may name an ``agent``), without
        ``previous_run_id``. ``thread``: ``"new"`` (default) or
        ``"continue"`` (each run a follow-up of the previous); ``overlap``:
        ``"skip"`` (default) or ``"enqueue"``, what a tick does while the
        previous run is live.
        """
        fields = {
            "cron": cron,
            "run": run,
            "timezone": timezone,
            "thread": thread,
            "overlap": overlap,
            "enabled": enabled,
            "name": name,
        }
        return schedule_of(self._request("POST", "/v1/schedules", json=schedule_body(fields)))

    def get_schedule(self, schedule_id: str) -> Schedule:
        """The schedule ``schedule_id``, with its next tick and newest run."""
        return schedule_of(self._request("GET", schedule_path(schedule_id)))

    def update_schedule(self, schedule_id: str, **changes: Any) -> Schedule:
        """Change a schedule (``PATCH``): each keyword given is sent as is
        (``cron``, ``timezone``, ``run``, ``thread``, ``overlap``,
        ``enabled``, ``name``; ``name=None`` clears it)."""
        return schedule_of(self._request("PATCH", schedule_path(schedule_id), json=changes))

    def delete_schedule(self, schedule_id: str) -> None:
        """Delete a schedule; the runs it made stay."""
        self._request("DELETE", schedule_path(schedule_id))

    def trigger_schedule(self, schedule_id: str) -> Run:
        """One run of the schedule now (``POST .../trigger``), without a tick
        of its own; ``409 run_live`` while its previous run is live and its
        overlap is ``skip``."""
        return run_of(self._request("POST", schedule_path(schedule_id, "/trigger")))

    def list_schedules_page(
        self, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> SchedulePage:
        """One page of schedules, in the order they were made: pass its
        ``next_cursor`` as ``cursor`` for the next."""
        response = self._request("GET", "/v1/schedules", params=_page_params(limit, cursor))
        return SchedulePage.from_dict(json_object(response))

    def list_schedules(
        self, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Generator[Schedule, None, None]:
        """Every schedule, fetched ``limit`` at a time as the iteration goes on."""
        while True:
            page = self.list_schedules_page(limit, cursor)
            yield from page.schedules
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


class AsyncSchedulesMixin:
    """The schedules' methods of ``AsyncClient`` (as ``SchedulesMixin``'s)."""

    _request: Any

    async def create_schedule(
        self,
        cron: str,
        run: Mapping[str, Any],
        *,
        timezone: Optional[str] = None,
        thread: Optional[str] = None,
        overlap: Optional[str] = None,
        enabled: Optional[bool] = None,
        name: Optional[str] = None,
    ) -> Schedule:
        """Create a schedule (``POST /v1/schedules``) and return it."""
        fields = {
            "cron": cron,
            "run": run,
            "timezone": timezone,
            "thread": thread,
            "overlap": overlap,
            "enabled": enabled,
            "name": name,
        }
        response = await self._request("POST", "/v1/schedules", json=schedule_body(fields))
        return schedule_of(response)

    async def get_schedule(self, schedule_id: str) -> Schedule:
        """The schedule ``schedule_id``, with its next tick and newest run."""
        return schedule_of(await self._request("GET", schedule_path(schedule_id)))

    async def update_schedule(self, schedule_id: str, **changes: Any) -> Schedule:
        """Change a schedule (``PATCH``): each keyword given is sent as is."""
        response = await self._request("PATCH", schedule_path(schedule_id), json=changes)
        return schedule_of(response)

    async def delete_schedule(self, schedule_id: str) -> None:
        """Delete a schedule; the runs it made stay."""
        await self._request("DELETE", schedule_path(schedule_id))

    async def trigger_schedule(self, schedule_id: str) -> Run:
        """One run of the schedule now, without a tick of its own."""
        return run_of(await self._request("POST", schedule_path(schedule_id, "/trigger")))

    async def list_schedules_page(
        self, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> SchedulePage:
        """One page of schedules, in the order they were made."""
        params = _page_params(limit, cursor)
        response = await self._request("GET", "/v1/schedules", params=params)
        return SchedulePage.from_dict(json_object(response))

    async def list_schedules(
        self, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> AsyncGenerator[Schedule, None]:
        """Every schedule, fetched ``limit`` at a time as the iteration goes on."""
        while True:
            page = await self.list_schedules_page(limit, cursor)
            for schedule in page.schedules:
                yield schedule
            if page.next_cursor is None:
                return
            cursor = page.next_cursor
