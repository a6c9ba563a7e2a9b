"""`clock-server db upgrade|downgrade|current|history`: move the database's schema between the
revisions of this release's migrations, and say where it stands.

Exit codes: 0 done; 1 the database failed or refused the migration; 2 a revision this release
does not know, or a database migrated by a newer release (as for a bad setting)."""

from __future__ import annotations

import argparse
import sys

from clock_server.settings import Settings, mask_url
from clock_server.store import migrate


def configure(db: argparse.ArgumentParser) -> None:
    """The four actions of the `db` command's parser."""
    actions = db.add_subparsers(dest="db_action", metavar="action", required=True)
    up = actions.add_parser("upgrade", help="migrate up to REV (default: head, the newest)")
    up.add_argument("revision", nargs="?", default="head", metavar="REV")
    down = actions.add_parser(
        "downgrade", help="migrate down to REV (a revision; base drops every table)"
    )
    down.add_argument("revision", metavar="REV")
    actions.add_parser("current", help="print the database's revision")
    actions.add_parser("history", help="list this release's revisions, newest first")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Carry out `clock-server db <action>` on the settings' database."""
    action = args.db_action
    try:
        if action == "history":
            return _history()
        if action == "current":
            return _current(settings.database_url)
        step = migrate.upgrade_url if action == "upgrade" else migrate.downgrade_url
        moved = step(settings.database_url, args.revision)
    except (migrate.UnknownRevision, migrate.SchemaFromNewerRelease) as error:
        return _fail(action, str(error), 2)
    except migrate.MigrationError as error:
        return _fail(action, str(error), 1)
    where = mask_url(settings.database_url)
    asked = migrate.head() if args.revision == "head" else args.revision
    if moved.before == moved.after == asked:
        print(f"{where}: already at {_name(moved.after)}")
    elif moved.before == moved.after:
        print(f"{where}: at {_name(moved.after)}, nothing to {action} to {args.revision}")
    else:
        print(f"{where}: {action}d from {_name(moved.before)} to {_name(moved.after)}")
    return 0


def _current(url: str) -> int:
    revision = migrate.current_url(url)
    if revision is not None and not migrate.known(revision):
        print(f"{revision} (newer than this release, whose newest is {migrate.head()})")
    else:
        print(_name(revision))
    return 0


def _history() -> int:
    newest = migrate.head()
    for script in migrate.history():
        mark = " (head)" if script.revision == newest else ""
        print(f"{script.revision}  {script.title}{mark}")
    return 0


def _name(revision: str | None) -> str:
    if revision is None:
        return "base (no schema)"
    return f"{revision} (head)" if revision == migrate.head() else revision


def _fail(action: str, message: str, code: int) -> int:
    print(f"clock-server db {action}: {message}", file=sys.stderr)
    return code
