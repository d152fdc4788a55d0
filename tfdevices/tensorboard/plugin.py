"""The Placement dashboard: a TensorBoard plugin registered through the ``tensorboard_plugins`` entry point.

``tensorboard --logdir DIR`` loads it with no flag and shows a *Placement* tab
whenever a run under ``DIR`` holds a report written by
:func:`tfdevices.tensorboard.write_placement` or the ``PlacementLogger`` callback.
The frontend is plain JavaScript and CSS shipped in ``static/`` (no build step,
no network fetch); the data routes below answer it with JSON computed by
:mod:`tfdevices.tensorboard.views`:

* ``/runs``: the runs that hold a placement report, with their tags and steps, and the
  profiles TensorFlow wrote under the log directory (``<run>/plugins/profile/<session>/``:
  Keras' ``TensorBoard(profile_batch=...)``, ``tf.profiler``), one tag ``profile/<session>``
  each, read with :func:`tfdevices.verify.read_profile` when opened;
* ``/view?run=R&tag=T&step=S``: devices, transfer matrix, scopes, weight reads, timeline;
* ``/diff?run=..&tag=..&step=..&run2=..&tag2=..&step2=..``: what changed between two runs or steps;
* ``/trace?run=..&tag=..&step=..``: the step as a Chrome trace (``traceEvents`` JSON);
* ``/changes?run=..&tag=..``: what changed over the run, step by step (the text ``NAME/drift``
  that ``PlacementLogger`` writes at each capture whose placement changed);
* ``/static/<file>``: the frontend.

Reports are found in both forms a run can hold: text summaries ``NAME/json`` beside
``NAME/report`` (as ``write_placement`` writes them), and tensor summaries marked with
:func:`tfdevices.tensorboard.metadata.summary_metadata`. TensorBoard keeps a sample of
10 steps per tag by default; ``--samples_per_plugin=text=all,placement=all`` keeps
every captured step.

:class:`PlacementPlugin` answers the routes; :class:`PlacementRuns` reads what they show. This module
imports TensorBoard at the top: only TensorBoard imports it (``import
tfdevices`` does not).
"""

from __future__ import annotations

import functools
import json
import mimetypes
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from tensorboard import errors, plugin_util
from tensorboard.backend import http_util
from tensorboard.context import RequestContext
from tensorboard.data import provider
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tfdevices.core.errors import InputError
from tfdevices.tensorboard import views
from tfdevices.tensorboard.metadata import PLUGIN_NAME
from tfdevices.tensorboard.trace import chrome_trace
from tfdevices.verify import read_profile
from tfdevices.verify.profiles import ProfileFile, find_profiles

_TEXT = "text"
_SCALARS = "scalars"
_STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_MAX_STEPS = 10_000
_PROFILE = "profile/"  # the tag of a profile session: profile/<session>
# werkzeug's Request.application, which wraps methods too (werkzeug's types describe functions of a request only)
_application: Any = wrappers.Request.application
_PROFILE_SEARCH_S = 5  # the log directory is searched for profiles at most this often
_CACHE = 8  # views (JSON text) and stored series; a 1,000-layer view is about 2 MB


class PlacementRuns:
    """What a log directory holds for the Placement tab, read through TensorBoard's data provider.

    The stored reports (text or tensor summaries), the memory scalars and drift texts
    ``PlacementLogger`` writes beside them, and the profiles TensorFlow wrote under the
    log directory. What is read is kept in a small cache, keyed by the version of what
    it was read from (a series' last step and time, a profile's files and their times).
    Each method takes the request's context and experiment id, as the data provider does.
    """

    def __init__(self, data_provider: Any, logdir: str) -> None:
        self._provider = data_provider
        self._logdir = logdir
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    def any_report(self) -> bool:
        """Whether any run holds a report or a profile."""
        if self._provider is not None and self.placement_tags(RequestContext(), ""):
            return True
        return bool(self.profiles())

    def listing(self, ctx: RequestContext, eid: str) -> list[dict[str, Any]]:
        """Each stored report's run, tag and steps, then each profile's (``"kind": "profile"``)."""
        runs = []
        for run, tags in sorted(self.placement_tags(ctx, eid).items()):
            for tag, found in sorted(tags.items()):
                steps = [d.step for d in self.steps(ctx, eid, run, tag, found)]
                runs.append({"run": run, "tag": tag, "steps": steps})
        for run, profiles in sorted(self.profiles().items()):
            runs += [{"run": run, "tag": tag, "steps": [0], "kind": "profile"} for tag in sorted(profiles)]
        return runs

    def placement_tags(self, ctx: RequestContext, eid: str) -> dict[str, dict[str, tuple[str, Any]]]:
        """``{run: {tag: (plugin name, time series)}}`` of every stored report."""
        found: dict[str, dict[str, tuple[str, Any]]] = {}
        for plugin in (PLUGIN_NAME, _TEXT):
            listing = self._provider.list_tensors(ctx, experiment_id=eid, plugin_name=plugin) or {}
            for run, tags in listing.items():
                for tag, series in tags.items():
                    if plugin == PLUGIN_NAME or _is_report_text(tag, tags):
                        found.setdefault(run, {}).setdefault(tag, (plugin, series))
        return found

    def profiles(self) -> dict[str, dict[str, list[ProfileFile]]]:
        """``{run: {"profile/<session>": files}}`` of the profiles under the log directory (a bounded search).

        The search is repeated at most every few seconds: a profile written meanwhile shows on a reload.
        """
        if not self._logdir or not os.path.isdir(self._logdir):
            return {}

        def search() -> dict[str, dict[str, list[ProfileFile]]]:
            try:
                files = find_profiles(self._logdir)
            except InputError:
                return {}
            found: dict[str, dict[str, list[ProfileFile]]] = {}
            for f in files:
                run = f.run.replace(os.sep, "/")
                found.setdefault(run, {}).setdefault(_PROFILE + f.session, []).append(f)
            return found

        return self.cached(("profiles", int(time.monotonic() // _PROFILE_SEARCH_S)), search)

    def profile(self, run: str | None, tag: str) -> tuple[str, dict[str, Any]]:
        """A profile's report (JSON text), read once per version of its files, and where it was found."""
        files = self.profiles().get(run or "", {}).get(tag)
        if not files:
            raise errors.NotFoundError(f"no profile {tag!r} in run {run!r}")
        versions = tuple((f.path, f.mtime) for f in files)
        session = os.path.dirname(files[0].path)

        def read() -> str:
            try:
                return read_profile(session).to_json()
            except InputError as err:
                raise errors.InvalidArgumentError(str(err)) from None

        where = {
            "run": run,
            "tag": tag,
            "step": 0,
            "steps": [0],
            "wall_time": max(f.mtime for f in files),
            "kind": "profile",
        }
        return self.cached(("profile", versions), read), where

    def steps(self, ctx: RequestContext, eid: str, run: str, tag: str, found: tuple[str, Any]) -> list[Any]:
        """Every stored step of one report tag, read once per version of the series (its last step and time)."""
        plugin, series = found
        key = ("series", run, tag, plugin, series.max_step, series.max_wall_time)

        def read() -> list[Any]:
            data = self._provider.read_tensors(
                ctx,
                experiment_id=eid,
                plugin_name=plugin,
                downsample=_MAX_STEPS,
                run_tag_filter=provider.RunTagFilter(runs=[run], tags=[tag]),
            )
            return list(data.get(run, {}).get(tag, ()))

        return self.cached(key, read)

    def datum(
        self, ctx: RequestContext, eid: str, run: str | None, tag: str, step: str | None
    ) -> tuple[Any, dict[str, Any]]:
        """The stored step of a run's tag, and where it was found.

        The run's first tag when ``tag`` is empty, its last step when ``step`` is.
        """
        tags = self.placement_tags(ctx, eid)
        if run not in tags:
            raise errors.NotFoundError(f"no placement report in run {run!r}; runs with one: {sorted(tags)}")
        tag = tag or sorted(tags[run])[0]
        if tag not in tags[run]:
            raise errors.NotFoundError(f"run {run!r} has no placement tag {tag!r}; it has {sorted(tags[run])}")
        data = self.steps(ctx, eid, run, tag, tags[run][tag])
        if not data:
            raise errors.NotFoundError(f"run {run!r} tag {tag!r} holds no step")
        datum = data[-1] if step in (None, "") else next((d for d in data if str(d.step) == step), None)
        if datum is None:
            raise errors.NotFoundError(f"run {run!r} tag {tag!r} has no step {step}; it has {[d.step for d in data]}")
        where = {
            "run": run,
            "tag": tag,
            "step": datum.step,
            "steps": [d.step for d in data],
            "wall_time": datum.wall_time,
        }
        return datum, where

    def report_text(
        self, ctx: RequestContext, eid: str, run: str | None, tag: str, step: str | None
    ) -> tuple[str, dict[str, Any]]:
        """A report (JSON text), a stored step or a profile (a ``profile/<session>`` tag), and where it was found."""
        if tag.startswith(_PROFILE):
            return self.profile(run, tag)
        datum, where = self.datum(ctx, eid, run, tag, step)
        return _text(datum.numpy), where

    def memory(self, ctx: RequestContext, eid: str, run: str, tag: str, step: int) -> dict[str, dict[str, float]]:
        """``{device: {"current_bytes", "peak_bytes"}}`` logged by ``PlacementLogger`` at or before ``step``."""
        prefix = tag.rsplit("/", 1)[0] + "/memory/"
        listing = (
            self._provider.list_scalars(
                ctx, experiment_id=eid, plugin_name=_SCALARS, run_tag_filter=provider.RunTagFilter(runs=[run])
            )
            or {}
        )
        wanted = [t for t in listing.get(run, {}) if t.startswith(prefix)]
        if not wanted:
            return {}
        data = self._provider.read_scalars(
            ctx,
            experiment_id=eid,
            plugin_name=_SCALARS,
            downsample=_MAX_STEPS,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=wanted),
        )
        out: dict[str, dict[str, float]] = {}
        for t, points in data.get(run, {}).items():
            device, key = t[len(prefix) :].rsplit("/", 1)
            earlier = [p for p in points if p.step <= step] or list(points)
            if earlier:
                out.setdefault(device, {})[key] = float(earlier[-1].value)
        return out

    def changes(self, ctx: RequestContext, eid: str, run: str, tag: str) -> list[dict[str, Any]]:
        """Each step whose placement changed and the change (the text ``NAME/drift`` beside the tag ``NAME/...``)."""
        name = tag.rsplit("/", 1)[0] if "/" in tag and not tag.startswith(_PROFILE) else ""
        if not name:
            return []
        drift = name + "/drift"
        listing = (
            self._provider.list_tensors(
                ctx,
                experiment_id=eid,
                plugin_name=_TEXT,
                run_tag_filter=provider.RunTagFilter(runs=[run], tags=[drift]),
            )
            or {}
        )
        series = listing.get(run, {}).get(drift)
        if series is None:
            return []
        return [{"step": d.step, "summary": _text(d.numpy)} for d in self.steps(ctx, eid, run, drift, (_TEXT, series))]

    def cached(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        """``make()``, kept under ``key`` among the last few values asked for."""
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        value = make()
        with self._lock:
            self._cache[key] = value
            while len(self._cache) > _CACHE:
                self._cache.popitem(last=False)
        return value


class PlacementPlugin(base_plugin.TBPlugin):
    """Shows where each op of a run ran and how long it took (see the module docstring).

    Its routes answer HTTP requests; what they read, :class:`PlacementRuns` reads.
    """

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._runs = PlacementRuns(context.data_provider, getattr(context, "logdir", None) or "")

    # -- what TensorBoard asks every plugin

    def get_plugin_apps(self) -> dict[str, Any]:
        """TensorBoard's routes of the Placement tab."""
        return {
            "/runs": self._serve_runs,
            "/view": self._serve_view,
            "/diff": self._serve_diff,
            "/trace": self._serve_trace,
            "/changes": self._serve_changes,
            "/static/*": self._serve_static,
        }

    def is_active(self) -> bool:
        """Whether any run holds a report (those written as text, before the plugin had its own summaries)."""
        return self._runs.any_report()

    def data_plugin_names(self) -> tuple[str, ...]:
        """The summary plugin name whose data this tab reads."""
        return (PLUGIN_NAME,)

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        """The tab's name and script for TensorBoard's frontend."""
        return base_plugin.FrontendMetadata(
            es_module_path="/static/index.js", tab_name="Placement", disable_reload=False
        )

    # -- routes

    def _report_text(self, request: wrappers.Request, suffix: str = "") -> tuple[str, dict[str, Any]]:
        """The report a request names (``run``, ``tag``, ``step``, each with ``suffix``), and where it was found."""
        args = request.args
        ctx, eid = _context(request)
        return self._runs.report_text(
            ctx, eid, args.get("run" + suffix), args.get("tag" + suffix) or "", args.get("step" + suffix)
        )

    @_application
    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        return http_util.Respond(request, {"runs": self._runs.listing(*_context(request))}, "application/json")

    @_application
    def _serve_view(self, request: wrappers.Request) -> wrappers.Response:
        text, where = self._report_text(request)
        memory = (
            {}
            if where.get("kind") == "profile"
            else self._runs.memory(*_context(request), where["run"], where["tag"], where["step"])
        )
        key = (
            "view",
            where["run"],
            where["tag"],
            where["step"],
            where["wall_time"],
            json.dumps(memory, sort_keys=True),
        )

        def build() -> str:
            view = views.dashboard_view(json.loads(text), memory)
            return json.dumps({**where, **view}, separators=(",", ":"))

        return http_util.Respond(request, self._runs.cached(key, build), "application/json")

    @_application
    def _serve_diff(self, request: wrappers.Request) -> wrappers.Response:
        (before, where), (after, where2) = self._report_text(request), self._report_text(request, "2")
        body = {"before": where, "after": where2, **views.diff_view(json.loads(before), json.loads(after))}
        return http_util.Respond(request, body, "application/json")

    @_application
    def _serve_trace(self, request: wrappers.Request) -> wrappers.Response:
        text, where = self._report_text(request)
        try:
            trace = chrome_trace(json.loads(text))
        except InputError as err:
            raise errors.InvalidArgumentError(str(err)) from None
        name = f"{where['run']}-{where['step']}.trace.json".replace("/", "_")
        response = http_util.Respond(request, trace, "application/json")
        response.headers["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    @_application
    def _serve_changes(self, request: wrappers.Request) -> wrappers.Response:
        run, tag = request.args.get("run") or "", request.args.get("tag") or ""
        changes = self._runs.changes(*_context(request), run, tag)
        return http_util.Respond(request, {"run": run, "tag": tag, "changes": changes}, "application/json")

    @_application
    def _serve_static(self, request: wrappers.Request) -> wrappers.Response:
        name = request.path.rsplit("/static/", 1)[-1]
        if name not in _static_files():
            return http_util.Respond(request, "Not found", "text/plain", code=404)
        mimetype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if name.endswith(".js"):
            mimetype = "text/javascript"
        with open(os.path.join(_STATIC, name), "rb") as f:
            return http_util.Respond(request, f.read(), mimetype)


def _context(request: wrappers.Request) -> tuple[RequestContext, str]:
    """The request's context and experiment id, as TensorBoard's data provider takes them."""
    return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)


@functools.cache
def _static_files() -> frozenset[str]:
    """The frontend's files: only these names are served (no path from a request reaches the disk)."""
    return frozenset(os.listdir(_STATIC))


def _is_report_text(tag: str, tags: Any) -> bool:
    """A text summary ``NAME/json`` beside ``NAME/report``: how write_placement stored reports as text."""
    return tag.endswith("/json") and tag[: -len("json")] + "report" in tags


def _text(value: Any) -> str:
    """The string held by a scalar string tensor (a NumPy bytes array)."""
    item = value.item() if hasattr(value, "item") else value
    if isinstance(item, bytes):
        return item.decode("utf-8")
    if getattr(value, "size", 1) != 1:
        raise errors.InvalidArgumentError("a placement report is one string per step")
    return str(item)
