"""The deployment manifest: what ``optimize`` writes, ``validate`` checks, ``diff`` compares and
``export`` turns into the configs a serving stack reads."""

from pdplan.manifest.build import Identity, Release, build_manifest
from pdplan.manifest.document import read_manifest, schema

__all__ = ["Identity", "Release", "build_manifest", "read_manifest", "schema"]
