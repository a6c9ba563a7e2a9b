"""The database: every SQL statement of the service, and the interfaces the engine uses.

Only this package imports SQLAlchemy and Alembic. The engine sees it through `ports`."""
