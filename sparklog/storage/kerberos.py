"""Kerberos logins of the ``hdfs://`` backend: a principal and its keytab, renewed.

A Kerberized HDFS (``hadoop.security.authentication=kerberos`` in the cluster's
``core-site.xml``) accepts a client that shows a Kerberos ticket. A long-running process
(the broker, a Spark job) cannot rely on someone's ``kinit``: it logs in from a keytab
and renews its ticket before the ticket expires, as Hadoop's own daemons do.

:func:`keytab_login` logs ``principal`` in from ``keytab`` through Hadoop's
``UserGroupInformation.loginUserFromKeytabAndReturnUGI`` (once per principal and keytab
in a process: every FileIO of the process shares the login) and starts one daemon
thread that calls ``checkTGTAndReloginFromKeytab`` every ``renew_interval`` seconds:
Hadoop logs in again once 80% of the ticket's lifetime has passed (and never more than
once per ``hadoop.kerberos.min.seconds.before.relogin``, default 60 s), so the
ticket is renewed before it expires. Each login and renewal is logged with the end time
of the new ticket. :meth:`KeytabLogin.run_as` runs a Java call as the principal (the
``DistributedFileSystem`` it creates keeps that identity for its RPCs).

Hadoop's security settings are JVM-wide: the first Kerberos login sets
``UserGroupInformation``'s configuration for the whole process (one process reaches
one Kerberized realm; a process that also reaches an insecure cluster needs
``ipc.client.fallback-to-simple-auth-allowed=true``). The Java Kerberos library finds
the KDC through ``krb5.conf`` (``/etc/krb5.conf``, or ``-Djava.security.krb5.conf=...``
in ``HADOOP_CLIENT_OPTS``).
"""

from __future__ import annotations

import datetime
import logging
import os
import threading

from sparklog.errors import InvalidArgumentError, StorageError
from sparklog.storage import jvm

log = logging.getLogger(__name__)

#: Seconds between two checks of a keytab login's ticket (Hadoop logs in again once 80%
#: of the ticket's lifetime has passed, so a check every minute renews any ticket that
#: lives more than five minutes in time).
DEFAULT_RENEW_INTERVAL = 60.0

#: The names under which the broker's properties and the Spark source's options give
#: a keytab login (the broker's ``storage.*`` prefix; Spark's own ``spark.kerberos.*``
#: configure Spark's JVM, not sparklog's storage client).
PRINCIPAL_KEY = "storage.kerberos.principal"
KEYTAB_KEY = "storage.kerberos.keytab"
RENEW_PERIOD_KEY = "storage.kerberos.ticket.renew.period.ms"

_LOCK = threading.Lock()
_LOGINS: dict[tuple[int, str, str], "KeytabLogin"] = {}


def _format_ms(ms: int | None) -> str:
    if ms is None:
        return "unknown"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(
        timespec="seconds")


class KeytabLogin:
    """A principal logged in from its keytab (Hadoop's UserGroupInformation), renewed by
    a daemon thread; built by :func:`keytab_login`."""

    def __init__(self, principal: str, keytab: str, renew_interval: float):
        self.principal = principal
        self.keytab = keytab
        self.renew_interval = renew_interval
        ugi_cls = jvm.jclass("org.apache.hadoop.security.UserGroupInformation")
        self.ugi = self._java("log in", ugi_cls.loginUserFromKeytabAndReturnUGI,
                              principal, keytab)
        #: times the ticket was renewed (a new ticket from the keytab)
        self.renewals = 0
        self.ticket_end_ms = self.tgt_end_ms()
        log.info("Kerberos: logged in as %s from keytab %s; ticket valid until %s",
                 principal, keytab, _format_ms(self.ticket_end_ms))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, daemon=True,
                                        name=f"kerberos-renew-{principal}")
        self._thread.start()

    def _java(self, op: str, fn, *args):
        import jpype

        try:
            return fn(*args)
        except jpype.JException as e:
            chain = "; ".join(f"{n}: {m}" for n, m in jvm.exception_chain(e))
            raise StorageError(f"Kerberos: {op} as {self.principal} with keytab "
                               f"{self.keytab} failed ({chain})") from None

    def run_as(self, fn, *args):
        """``fn(*args)`` (a Java call) run as this principal (``UGI.doAs``); a Java
        exception it throws propagates as such."""
        import jpype

        @jpype.JImplements("java.security.PrivilegedExceptionAction")
        class _Action:
            @jpype.JOverride
            def run(self):
                return fn(*args)

        return self.ugi.doAs(_Action())

    def tgt_end_ms(self) -> int | None:
        """End time (ms since the epoch) of the principal's ticket-granting ticket, None
        when it holds none."""
        def end():
            subject_cls = jvm.jclass("javax.security.auth.Subject")
            access = jvm.jclass("java.security.AccessController")
            subject = subject_cls.getSubject(access.getContext())
            ticket_cls = jvm.jclass("javax.security.auth.kerberos.KerberosTicket")
            ends = [int(t.getEndTime().getTime())
                    for t in subject.getPrivateCredentials(ticket_cls)
                    if str(t.getServer().getName()).startswith("krbtgt/")]
            return max(ends) if ends else None

        try:
            return self.run_as(end)
        except Exception:  # a diagnostic only
            return None

    def check_and_renew(self) -> bool:
        """Log in again from the keytab if the ticket is near its end (Hadoop's
        ``checkTGTAndReloginFromKeytab``); True when a new ticket was obtained."""
        self._java("renew the ticket", self.ugi.checkTGTAndReloginFromKeytab)
        end = self.tgt_end_ms()
        if end is not None and end != self.ticket_end_ms:
            self.ticket_end_ms = end
            self.renewals += 1
            log.info("Kerberos: ticket of %s renewed from keytab %s; valid until %s",
                     self.principal, self.keytab, _format_ms(end))
            return True
        return False

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_interval):
            import jpype

            if not jpype.isJVMStarted():  # the process is exiting
                return
            try:
                self.check_and_renew()
            except Exception as e:  # the KDC may be back at the next check
                log.warning("%s (retried in %.1f s)", e, self.renew_interval)

    def stop(self) -> None:
        """Stop renewing (the login itself stays valid until its ticket expires)."""
        self._stop.set()


def keytab_login(conf, principal: str, keytab: str,
                 renew_interval: float = DEFAULT_RENEW_INTERVAL) -> KeytabLogin:
    """The process's :class:`KeytabLogin` of ``principal`` from ``keytab`` (logged in on
    first use). ``conf`` (a Hadoop Configuration) becomes UserGroupInformation's
    configuration when the process's Hadoop security is not Kerberos yet, with
    ``hadoop.security.authentication=kerberos``. StorageError naming the cause when the
    keytab is missing or the KDC refuses."""
    if not isinstance(principal, str) or not principal.strip():
        raise InvalidArgumentError(f"Kerberos principal must be a non-empty str, "
                                   f"got {principal!r}")
    if not isinstance(keytab, str) or not keytab:
        raise InvalidArgumentError(f"a Kerberos principal ({principal}) needs its keytab "
                                   f"file, got {keytab!r}")
    keytab = os.path.abspath(keytab)
    if not os.path.isfile(keytab) or not os.access(keytab, os.R_OK):
        raise StorageError(f"Kerberos: keytab {keytab} of {principal} is not a readable "
                           "file")
    renew_interval = float(renew_interval)
    if not renew_interval > 0:
        raise InvalidArgumentError(f"renew_interval must be > 0 seconds, got {renew_interval}")
    key = (os.getpid(), principal, keytab)
    with _LOCK:
        login = _LOGINS.get(key)
        if login is None:
            ugi_cls = jvm.jclass("org.apache.hadoop.security.UserGroupInformation")
            if not ugi_cls.isSecurityEnabled():
                conf.set("hadoop.security.authentication", "kerberos")
                ugi_cls.setConfiguration(conf)
            login = _LOGINS[key] = KeytabLogin(principal, keytab, renew_interval)
        return login


def kerberos_options(principal, keytab, renew_period_ms=None) -> dict:
    """The ``open_fileio`` options (``principal``, ``keytab``, ``renew_interval``) of the
    settings :data:`PRINCIPAL_KEY`, :data:`KEYTAB_KEY` and :data:`RENEW_PERIOD_KEY`
    (empty or None: not set); {} when neither a principal nor a keytab is set.
    InvalidArgumentError naming the setting when one comes without the other or the
    period is not a positive number of milliseconds. No JVM is started."""
    principal = str(principal).strip() if principal else ""
    keytab = str(keytab).strip() if keytab else ""
    if not principal and not keytab:
        return {}
    if not principal or not keytab:
        missing = PRINCIPAL_KEY if not principal else KEYTAB_KEY
        raise InvalidArgumentError(
            f"{PRINCIPAL_KEY} and {KEYTAB_KEY} go together: {missing} is not set")
    options = {"principal": principal, "keytab": keytab}
    if renew_period_ms not in (None, ""):
        try:
            period = int(str(renew_period_ms).strip())
        except ValueError:
            period = 0
        if period <= 0:
            raise InvalidArgumentError(f"{RENEW_PERIOD_KEY}={renew_period_ms!r} must be a "
                                       "positive number of milliseconds")
        options["renew_interval"] = period / 1000
    return options
