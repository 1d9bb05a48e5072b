"""conveyor_conformance: the executable conveyor.v1 conformance suite."""
