"""Other training libraries' APIs over zrt, so their scripts run with only their imports changed:
`import zrt.compat.deepspeed as deepspeed` (docs/python.md)."""
