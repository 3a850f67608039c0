"""`python -m rlkeep_dev.devserver.hub --root DIR [--port 0] [--token T] --ready-file F`: run the server."""
from __future__ import annotations

from rlkeep_dev.devserver.hub.server import main

raise SystemExit(main())
