"""Test settings shared by every module.

Property tests explore new random examples on developers' machines; in CI (``CI`` set, as .ci/run is
run) they are derandomized, so a given commit passes or fails the same way every time.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
