"""CronJob decisions against upstream's behaviour: robfig/cron v3 parsing and Next (its
parser_test.go/spec_test.go cases: names, steps, ranges, dom/dow star rule, DST), and
cronjob_controllerv2_test.go / utils_test.go (mostRecentScheduleTime, deadlines, concurrency,
history limits, job names)."""

from __future__ import annotations

import datetime as dt

import pytest
from controllers_objects import meta, ts

from nodeagent.cluster.controllers.common.actions import Create, Delete, Event, UpdateStatus
from nodeagent.cluster.controllers.cronjob import reconcile as cjc
from nodeagent.cluster.controllers.cronjob.schedule import ScheduleError, parse


def at(s: str, zone: str = "UTC") -> float:
    return dt.datetime.fromisoformat(s).replace(tzinfo=dt.UTC if zone == "UTC" else __import__("zoneinfo").ZoneInfo(zone)).timestamp()


def iso(t: float, zone: str = "UTC") -> str:
    z = dt.UTC if zone == "UTC" else __import__("zoneinfo").ZoneInfo(zone)
    return dt.datetime.fromtimestamp(t, z).strftime("%Y-%m-%d %H:%M")


@pytest.mark.parametrize(("spec", "start", "want"), [
    ("* * * * *", "2024-01-01 00:00:30", "2024-01-01 00:01"),
    ("*/15 9-17 * * MON-FRI", "2024-03-01 17:50:00", "2024-03-04 09:00"),      # Friday evening -> Monday
    ("0 0 29 2 *", "2024-03-01 00:00:00", "2028-02-29 00:00"),
    ("0 12 1 * mon", "2024-01-02 00:00:00", "2024-01-08 12:00"),              # dom OR dow when neither is *
    ("0 12 * * mon", "2024-01-02 00:00:00", "2024-01-08 12:00"),
    ("0 12 ? * 0", "2024-01-02 00:00:00", "2024-01-07 12:00"),               # ? is *; 0 is Sunday
    ("5/20 * * * *", "2024-01-01 00:00:00", "2024-01-01 00:05"),             # N/step means N-max/step
    ("0 0 1 JAN,jul *", "2024-02-01 00:00:00", "2024-07-01 00:00"),
    ("@hourly", "2024-01-01 10:20:00", "2024-01-01 11:00"),
    ("@weekly", "2024-01-01 10:20:00", "2024-01-07 00:00"),
    ("@yearly", "2024-01-01 10:20:00", "2025-01-01 00:00"),
])
def test_next_activation(spec, start, want) -> None:
    assert iso(parse(spec).next(at(start))) == want


def test_time_zones_and_dst_as_robfig() -> None:
    s = parse("30 2 * * *", "America/New_York")
    t = s.next(at("2024-03-09 12:00"))
    assert iso(t, "America/New_York") == "2024-03-11 02:30"      # 02:30 does not exist on 10 March: skipped
    assert iso(parse("CRON_TZ=Asia/Tokyo 0 9 * * *").next(at("2024-01-01 01:00")), "Asia/Tokyo") == "2024-01-02 09:00"
    assert parse("@every 90s").next(at("2024-01-01 00:00")) == at("2024-01-01 00:01:30")


@pytest.mark.parametrize(("spec", "msg"), [
    ("", "empty spec string"), ("* * * *", "expected exactly 5 fields, found 4"), ("60 * * * *", "end of range (60) above maximum (59)"),
    ("* * 0 * *", "beginning of range (0) below minimum (1)"), ("5-1 * * * *", "beginning of range (5) beyond end of range (1)"),
    ("*/0 * * * *", "step of range should be a positive number"), ("1-2-3 * * * *", "too many hyphens"), ("* * * * 7", "above maximum (6)"),
    ("@fortnightly", "unrecognized descriptor"), ("TZ=Mars/Base * * * * *", "provided bad location Mars/Base"),
    ("x * * * *", "failed to parse int from x"),
])
def test_parse_errors(spec, msg) -> None:
    with pytest.raises(ScheduleError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        parse(spec)


def cronjob(schedule="*/5 * * * *", *, status=None, created="2024-01-01 00:00:00", policy="Allow", deadline=None, suspend=False, tz=None,
            succ=3, fail=1):
    sp = {"schedule": schedule, "concurrencyPolicy": policy, "successfulJobsHistoryLimit": succ, "failedJobsHistoryLimit": fail,
          "jobTemplate": {"metadata": {"labels": {"app": "c"}}, "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}}
    if deadline is not None:
        sp["startingDeadlineSeconds"] = deadline
    if suspend:
        sp["suspend"] = True
    if tz:
        sp["timeZone"] = tz
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("c", uid="cj-uid", created=at(created)), "spec": sp, "status": status or {}}


def cjob(name, cj, cond=None, start=None, completion=None):
    st = {}
    if cond:
        st["conditions"] = [{"type": cond, "status": "True"}]
    if start:
        st["startTime"] = ts(at(start))
    if completion:
        st["completionTime"] = ts(at(completion))
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(name, owners=[{"apiVersion": "batch/v1", "kind": "CronJob", "name": "c",
                                                                                     "uid": "cj-uid", "controller": True}]), "status": st}


def test_starts_the_most_recent_missed_schedule_once_named_by_minutes() -> None:
    cj = cronjob()
    plan = cjc.sync(cj, [], now=at("2024-01-01 00:12:00"))
    (create,) = plan.of_type(Create)
    scheduled = at("2024-01-01 00:10:00")
    assert create.obj["metadata"]["name"] == f"c-{int(scheduled) // 60}"
    assert create.obj["metadata"]["annotations"][cjc.SCHEDULED_TIMESTAMP] == "2024-01-01T00:10:00Z"
    assert create.obj["metadata"]["ownerReferences"][0]["uid"] == "cj-uid"
    (upd,) = plan.of_type(UpdateStatus)
    assert upd.obj["status"]["lastScheduleTime"] == ts(scheduled) and upd.obj["status"]["active"][0]["name"] == create.obj["metadata"]["name"]
    assert plan.requeue_after == pytest.approx(3 * 60 + 0.1)
    again = cronjob(status=upd.obj["status"])
    assert not cjc.sync(again, [], now=at("2024-01-01 00:12:30")).of_type(Create)   # the same time is never started twice


def test_starting_deadline_and_too_many_missed() -> None:
    late = cjc.sync(cronjob(deadline=30), [], now=at("2024-01-01 00:12:00"))   # 00:10 is older than the deadline
    assert not late.of_type(Create) and late.requeue_after == pytest.approx(180.1)
    assert len(cjc.sync(cronjob(deadline=300), [], now=at("2024-01-01 00:12:00")).of_type(Create)) == 1
    many = cjc.sync(cronjob("* * * * *"), [], now=at("2024-01-02 00:00:30"))
    assert "TooManyMissedTimes" in [e.reason for e in many.of_type(Event)] and len(many.of_type(Create)) == 1
    _, recent, missed = cjc.most_recent(cronjob("* * * * *"), at("2024-01-02 00:00:30"), parse("* * * * *"), True)
    assert recent == at("2024-01-02 00:00:00") and missed == 1440


def test_concurrency_forbid_and_replace() -> None:
    active = [{"kind": "Job", "name": "c-old", "namespace": "default", "uid": "j1"}]
    running = cjob("c-old", cronjob())
    running["metadata"]["uid"] = "j1"
    cj = cronjob(policy="Forbid", status={"active": active, "lastScheduleTime": ts(at("2024-01-01 00:05:00"))})
    plan = cjc.sync(cj, [running], now=at("2024-01-01 00:10:10"))
    assert not plan.of_type(Create) and [e.reason for e in plan.of_type(Event)] == ["JobAlreadyActive"]
    cj = cronjob(policy="Replace", status={"active": active, "lastScheduleTime": ts(at("2024-01-01 00:05:00"))})
    plan = cjc.sync(cj, [running], now=at("2024-01-01 00:10:10"))
    (d,) = plan.of_type(Delete)
    assert d.ref.name == "c-old" and d.propagation == "Background" and len(plan.of_type(Create)) == 1


def test_suspend_history_and_finished_jobs_leave_the_active_list() -> None:
    assert not cjc.sync(cronjob(suspend=True), [], now=at("2024-01-01 00:12:00")).of_type(Create)
    cj = cronjob(succ=1, fail=1, status={"lastScheduleTime": ts(at("2024-01-01 00:10:00"))})
    jobs = [cjob(f"ok{i}", cj, "Complete", start=f"2024-01-01 00:0{i}:00", completion=f"2024-01-01 00:0{i}:30") for i in range(3)]
    jobs += [cjob(f"bad{i}", cj, "Failed", start=f"2024-01-01 00:0{i}:00") for i in range(2)]
    jobs[0]["metadata"]["uid"] = "u-ok0"
    cj["status"]["active"] = [{"name": "ok0", "uid": "u-ok0"}]
    plan = cjc.sync(cj, jobs, now=at("2024-01-01 00:11:00"))
    assert sorted(d.ref.name for d in plan.of_type(Delete)) == ["bad0", "ok0", "ok1"]
    (upd,) = plan.of_type(UpdateStatus)
    assert "active" not in upd.obj["status"] and upd.obj["status"]["lastSuccessfulTime"] == ts(at("2024-01-01 00:02:30"))


def test_time_zone_field_and_bad_zone() -> None:
    cj = cronjob("0 9 * * *", tz="Asia/Tokyo", created="2023-12-31 23:00:00")
    (create,) = cjc.sync(cj, [], now=at("2024-01-01 00:30:00")).of_type(Create)   # 09:30 in Tokyo
    assert create.obj["metadata"]["annotations"][cjc.SCHEDULED_TIMESTAMP] == "2024-01-01T09:00:00+09:00"
    bad = cjc.sync(cronjob(tz="Nowhere/City"), [], now=at("2024-01-01 00:30:00"))
    assert [e.reason for e in bad.of_type(Event)] == ["UnknownTimeZone"]
