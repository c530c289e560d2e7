"""HTTP helpers every route module shares: reading JSON bodies, JSON replies, admin access.

Lower than every package that serves routes (the core ``api/`` and each feature's routes), so
a feature's routes never import ``api/``.
"""

from fleetgate.http.access import AdminAccess, AdminAudit
from fleetgate.http.body import read_json
from fleetgate.http.replies import json_reply

__all__ = ["AdminAccess", "AdminAudit", "json_reply", "read_json"]
