"""The ``sparklog`` console command (placeholder until the CLI lands)."""
def main(argv=None):
    raise SystemExit("sparklog: CLI not built yet")
