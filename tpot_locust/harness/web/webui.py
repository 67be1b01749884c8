"""The TPOT tab in Locust's web UI: live per-class percentiles of our histograms.

Locust's React UI shows extra tabs given in ``template_args`` and fills their tables from
``extended_stats`` in its ``/stats/requests`` JSON (polled every couple of seconds); the
figures are the master's merged totals (closed intervals, so up to one report interval old),
their rows ``web_tab``'s.
``/tpot/summary.json`` serves the whole summary, as ``summary.json`` would be now, and
``/tpot/charts`` the live charts (``report.live_charts``; with the tail's timeline: the
prompt tokens in prefill and, while the server's metrics are sampled, its state), under
``--web-base-path`` and behind ``--web-login`` like Locust's own pages. ``web_guard``
refuses requests from other sites and ``web_form`` what a request may set; both sit in
front of every route. A running test's summary carries the server's sampled metrics so far
(``run["server_metrics"]``, from the run state's sampler where it has one)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from tpot_locust.common.run_facts import NO_FACTS, ServerMetrics, json_default
from tpot_locust.common.secrets import redact_url
from tpot_locust.common.text_safety import printable
from tpot_locust.harness.web import web_guard
from tpot_locust.harness.web.web_form import swarm_refusal, user_settings_refusal
from tpot_locust.harness.web.web_tab import COLUMNS, TAB_KEY, tab_rows
from tpot_locust.report.histograms_file import histograms_document
from tpot_locust.report.live_charts import charts_fragment, charts_page
from tpot_locust.report.summary import build_summary
from tpot_locust.report.summary_types import Summary

if TYPE_CHECKING:
    from locust.env import Environment

    from tpot_locust.harness.run.run_state import RunState
    from tpot_locust.harness.watch.server_sampler import ServerSampler

logger = logging.getLogger(__name__)
T = TypeVar("T")


class PerTick:
    """What a page makes from the totals, made again only once they changed: they move at
    a report interval's close (``Collector.tick``), a test's start, a reset and its end, so
    a page polled back to back costs one build an interval (``/tpot/charts/fragment``
    polled in a loop had held a local run's token-reading loop ~50 %)."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self._made: dict[str, tuple[tuple[int, bool, float], Any]] = {}

    def get(self, name: str, make: Callable[[], T]) -> T:
        state = self.state
        key = (state.tests_started, state.running, state.collector.last_tick_wall_s)
        known = self._made.get(name)
        if known is not None and known[0] == key:
            return cast(T, known[1])
        made = make()
        self._made[name] = (key, made)
        return made


def install(environment: Environment, state: RunState) -> None:
    web_ui = environment.web_ui
    if web_ui is None:
        return
    from flask import Response, request

    app = web_ui.app
    assert app is not None  # made by WebUI.__init__ (Locust types it Optional)
    web_guard.install(app)
    web_ui.template_args["extended_tabs"] = [{"title": "TPOT", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": key, "title": title} for key, title in COLUMNS]}
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "/tpot/summary.json", "title": "TPOT summary (summary.json, now)"}
    ]

    base = getattr(environment.parsed_options, "web_base_path", None) or ""
    web_ui.template_args["extended_csv_files"].append(
        {"href": f"{base}/tpot/charts", "title": "TPOT charts (live percentile plots)"}
    )

    @app.before_request
    def _check_what_is_set() -> Response | None:
        """Refuse a Start form or user-class settings that set what a web request may not
        (``web_form``), before Locust applies any of it."""
        if request.method != "POST" or not _signed_in():
            return None  # without a login the route itself refuses
        if request.path == f"{base}/swarm":
            shown = set(web_ui.template_args.get("extra_options") or {})
            parsed = vars(environment.parsed_options) if environment.parsed_options else {}
            why = swarm_refusal(request.form, parsed, shown, state.scenario)
        elif request.path == f"{base}/user":
            classes = environment.available_user_classes or {}
            why = user_settings_refusal(request.get_data(), classes)
        else:
            return None
        if why is None:
            return None
        logger.warning("tpot-locust: web UI request refused: %s", printable(why))
        host = redact_url(environment.host)
        body = json.dumps({"success": False, "message": why, "host": host})
        return Response(body, status=400, mimetype="application/json")

    def _signed_in() -> bool:
        if not web_ui.web_login:
            return True
        from flask_login import current_user

        return bool(current_user.is_authenticated)

    @app.after_request
    def _add_tab_rows(response: Response) -> Response:
        if request.path != f"{base}/stats/requests" or response.status_code != 200:
            return response
        data = response.get_json(silent=True)
        if isinstance(data, dict):
            extended = [{"key": TAB_KEY, "data": tab_rows(state)}]
            response.set_data(json.dumps({**data, "extended_stats": extended}))
        return response

    @app.route(f"{base}/tpot/charts")
    @web_ui.auth_required_if_enabled
    def _charts() -> Response:
        return Response(
            charts_page(f"{base}/tpot/charts/fragment", _fragment_html()), mimetype="text/html"
        )

    @app.route(f"{base}/tpot/charts/fragment")
    @web_ui.auth_required_if_enabled
    def _charts_fragment() -> Response:
        return Response(_fragment_html(), mimetype="text/html")

    per_tick = PerTick(state)

    def _fragment_html() -> str:
        return per_tick.get(
            "fragment",
            lambda: charts_fragment(_live_summary(), state.collector.totals, state.running),
        )

    def _live_summary() -> Summary:
        """The summary as it would be now, with the server's sampled metrics so far (as of
        the last report interval: a shallow copy, for a caller to add to)."""
        return per_tick.get("summary", _made_summary).copy()

    def _made_summary() -> Summary:
        run = state.run_info()
        if (server := _server_metrics_now()) is not None:
            run = replace(run, server_metrics=server)
        return build_summary(state.collector.totals, run)

    def _server_metrics_now() -> ServerMetrics | None:
        """The sampler's summary while a test runs (``run["server_metrics"]`` so far); the
        last test's once it stopped; None where the server's metrics are not sampled."""
        sampler: ServerSampler | None = getattr(state, "sampler", None)
        if sampler is not None:
            try:
                return sampler.summary()
            except Exception:  # the live page must not fail on the sampler's state
                logger.debug("tpot-locust: server metrics for the live page", exc_info=True)
                return None
        finished = _finished_summary()
        server = finished.get("run", NO_FACTS).server_metrics if finished is not None else None
        return server if isinstance(server, dict) else None

    def _finished_summary() -> Summary | None:
        """The last test's summary as written, once it stopped (None while one runs)."""
        return None if state.running else state.summary

    @app.route(f"{base}/tpot/summary.json")
    @web_ui.auth_required_if_enabled
    def _summary() -> Response:
        finished = _finished_summary()  # the finished test's own, as written (a copy)
        summary = finished.copy() if finished is not None else _live_summary()
        summary["running"] = state.running  # a running test's summary is not yet complete
        summary["test"] = state.tests_started  # of this web-UI session (0: none yet)
        if state.running:
            summary["complete"] = False
        text = json.dumps(summary, indent=2, default=json_default)
        return Response(text, mimetype="application/json")

    @app.route(f"{base}/tpot/histograms.json")
    @web_ui.auth_required_if_enabled
    def _histograms() -> Response:
        """The totals as ``histograms.json`` holds them: a finished test's re-reported,
        compared or drawn elsewhere (a sweep step's folder) from them."""
        finished = _finished_summary()
        run = finished["run"] if finished is not None else state.run_info()
        document = histograms_document(state.collector.totals, run)
        document["test"] = state.tests_started
        return Response(json.dumps(document), mimetype="application/json")
