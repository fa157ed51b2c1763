"""What a process tells its operators: Prometheus counters and histograms (``metrics``), the ids a
log line carries (``context``) and the log format (``logs``). Imports nothing of Baton, so every
layer may record where its event happens."""
