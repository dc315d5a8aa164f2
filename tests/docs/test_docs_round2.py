"""Docs say what is true today (issue #32 item 15)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _doc(name: str) -> str:
    return (ROOT / "docs" / name).read_text()


def test_clients_md_does_not_deny_what_security_md_provides():
    clients = _doc("clients.md")
    security = _doc("security.md")
    for feature in ("## TLS", "## Authentication (SASL)", "## Authorization (ACLs)", "## Quotas"):
        assert feature in security
    assert "no `kafka-configs.sh`, ACLs, quotas, SASL/TLS" not in clients
    assert "no ACLs," not in clients


def test_cluster_md_zookeeper_command_works_from_an_installed_sparklog():
    cluster = _doc("cluster.md")
    assert "-m\ntests.support.zkserver" not in cluster
    assert "tests.support.zkserver`" not in cluster
    assert "zkServer.sh start-foreground" in cluster


def test_upgrade_md_says_unknown_broker_configs_are_ignored_and_describe_shows_overrides():
    upgrade = _doc("upgrade.md")
    assert "unknown keys are refused by name |" not in upgrade
    assert "logged as a warning and ignored" in upgrade
    assert "shows the effective values" not in upgrade
    assert "lists only the overrides" in upgrade


def test_administration_md_is_linked_and_says_how_logs_rotate():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/administration.md)" in readme
    admin = _doc("administration.md")
    assert "journalctl -u sparklog-broker@" in admin
    assert "copytruncate" in admin
    unit = (ROOT / "deploy/hadoop-ha/systemd/sparklog-broker@.service").read_text()
    assert "StandardError=" not in unit or "journal" in unit


def test_administration_md_commands_parse_with_the_real_cli():
    import shlex

    from sparklog.cli.main import build_parser

    admin = _doc("administration.md")
    lines = [ln for ln in admin.replace("\\\n", " ").splitlines() if ln.startswith("sparklog ")]
    lines += [c for c in admin.split("`") if c.startswith("sparklog ") and " --" in c]
    assert len(lines) >= 2
    parser = build_parser()
    for line in lines:
        parser.parse_args(shlex.split(line)[1:])


def test_administration_md_restore_names_snapshots_distcp_and_log_ends():
    admin = _doc("administration.md")
    for needed in ("hdfs dfsadmin -allowSnapshot", "hdfs dfs -createSnapshot", "distcp",
                   "log-ends", "Stop every broker", "Lost partition data"):
        assert needed in admin, needed
    assert "### Lost partition data" in _doc("operations.md")
