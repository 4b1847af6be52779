"""The CronJob controller's pure core (pkg/controller/cronjob, controller v2).

schedule   five-field cron schedules with robfig/cron v3's ParseStandard semantics
reconcile  missed start times, startingDeadlineSeconds, concurrencyPolicy, suspend, history

May import: controllers.common, core and the scheduler's pure predicates (cluster/scheduler).
Never another controller, admission, auth or daemonkit.
"""
