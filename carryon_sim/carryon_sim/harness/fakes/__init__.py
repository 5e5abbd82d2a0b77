"""Fakes for tests and benchmarks, never used by runtime nodes: an openpi policy server
(openpi_server), a tiny random LeRobot ACT checkpoint (tiny_act) and a scripted
OpenAI-compatible chat server (openai_server)."""
