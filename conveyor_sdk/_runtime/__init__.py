"""Multi-process worker runtime: process executor, child entry point, pools, supervisor."""
