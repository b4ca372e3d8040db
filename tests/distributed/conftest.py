"""Before any test module of this directory imports Ray: nodes, GCS and workers talk over loopback.

Ray reads this when it is imported; set in one test module only, it came too late whenever another
module of the directory had imported Ray first, and the cluster's head then advertised the machine's
external address, where nothing answered.
"""

import os

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
