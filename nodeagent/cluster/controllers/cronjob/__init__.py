"""The CronJob controller's pure core (pkg/controller/cronjob, controller v2).

schedule   five-field cron schedules with robfig/cron v3's ParseStandard semantics
reconcile  missed start times, startingDeadlineSeconds, concurrencyPolicy, suspend, history
"""
