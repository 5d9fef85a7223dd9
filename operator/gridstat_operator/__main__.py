"""``python -m gridstat_operator``: the same as ``gridstat-operator``."""

from gridstat_operator.main import main

raise SystemExit(main())
