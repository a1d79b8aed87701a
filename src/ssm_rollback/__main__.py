"""``python -m ssm_rollback``: the same as the ``ssm-rollback`` console script."""

from ssm_rollback.cli import main

raise SystemExit(main())
