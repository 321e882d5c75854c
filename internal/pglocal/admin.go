package pglocal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/lib/pq"
)

// Cluster administration, run as the superuser: roles, databases and their
// owners, grants. This is not catalog SQL: names are quoted, and these
// statements take no placeholders.

// sqlHandOver lists the statements that give every object of the public schema
// owned by the superuser (current_user) to role $1. Indexes, and the sequences
// of serial and identity columns, follow their table; array types follow their
// element type.
const sqlHandOver = `
SELECT format('ALTER %s %s OWNER TO %I',
        CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
            WHEN 'S' THEN 'SEQUENCE' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END,
        c.oid::regclass, $1::text)
FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relowner = current_user::regrole
  AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
  AND NOT (c.relkind = 'S' AND EXISTS (SELECT FROM pg_depend d
      WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i')))
UNION ALL
SELECT format('ALTER ROUTINE %s OWNER TO %I', p.oid::regprocedure, $1::text)
FROM pg_proc p
WHERE p.pronamespace = 'public'::regnamespace AND p.proowner = current_user::regrole
UNION ALL
SELECT format('ALTER %s %s OWNER TO %I', CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, t.oid::regtype, $1::text)
FROM pg_type t
WHERE t.typnamespace = 'public'::regnamespace AND t.typowner = current_user::regrole
  AND t.typtype IN ('e', 'd', 'r', 'c')
  AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')`

// CreateRole makes name a role that logs in with password and may do nothing
// beyond what it owns or is granted: not a superuser, and not allowed to create
// databases or roles, to replicate or to bypass row security. A role that
// exists already gets the password and those attributes. Only a SCRAM verifier
// of the password reaches the server. The superuser (Config.User) cannot be
// made such a role. The server must be running.
func (c *Cluster) CreateRole(ctx context.Context, name, password string) error {
	if name == c.cfg.User {
		return fmt.Errorf("create role %s: it is the cluster's superuser", name)
	}
	if password == "" {
		return fmt.Errorf("create role %s: empty password", name)
	}
	verifier, err := scramVerifier(password)
	if err != nil {
		return fmt.Errorf("create role %s: %w", name, err)
	}
	err = c.withDB(ctx, "postgres", func(db *sql.DB) error {
		_, err := db.ExecContext(ctx, "CREATE ROLE "+pq.QuoteIdentifier(name))
		var pqErr *pq.Error
		if err != nil && !(errors.As(err, &pqErr) && pqErr.Code == "42710") { // duplicate_object
			return err
		}
		_, err = db.ExecContext(ctx, "ALTER ROLE "+pq.QuoteIdentifier(name)+
			" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD "+pq.QuoteLiteral(verifier))
		return err
	})
	if err != nil {
		return fmt.Errorf("create role %s: %w", name, err)
	}
	return nil
}

// CreateDatabase creates database name owned by role owner (the superuser
// when empty). A database that exists already is given to owner together
// with its public schema and every object in it that the superuser owns (so a
// database an earlier version kept as the superuser's moves to owner), in one
// transaction. The server must be running.
func (c *Cluster) CreateDatabase(ctx context.Context, name, owner string) error {
	if owner == "" {
		owner = c.cfg.User
	}
	err := c.withDB(ctx, "postgres", func(db *sql.DB) error {
		_, err := db.ExecContext(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(name)+" OWNER "+pq.QuoteIdentifier(owner))
		var pqErr *pq.Error
		if errors.As(err, &pqErr) && pqErr.Code == "42P04" { // duplicate_database
			return nil
		}
		return err
	})
	if err == nil && owner != c.cfg.User {
		err = c.withDB(ctx, name, func(db *sql.DB) error { return handOver(ctx, db, owner) })
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// handOver gives the database db is connected to, its public schema and the
// superuser's objects in that schema to owner, and takes from other roles the
// right to create objects there (granted to everyone before PostgreSQL 15).
func handOver(ctx context.Context, db *sql.DB, owner string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmts := []string{
		"ALTER SCHEMA public OWNER TO " + pq.QuoteIdentifier(owner),
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
	}
	rows, err := tx.QueryContext(ctx, sqlHandOver, owner)
	if err != nil {
		return fmt.Errorf("list the objects to hand over: %w", err)
	}
	for rows.Next() {
		var stmt string
		if err := rows.Scan(&stmt); err != nil {
			rows.Close()
			return err
		}
		stmts = append(stmts, stmt)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("list the objects to hand over: %w", err)
	}
	var dbname string
	if err := tx.QueryRowContext(ctx, "SELECT current_database()").Scan(&dbname); err != nil {
		return err
	}
	stmts = append(stmts, "ALTER DATABASE "+pq.QuoteIdentifier(dbname)+" OWNER TO "+pq.QuoteIdentifier(owner))
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return tx.Commit()
}

// GrantAccess lets role use database dbname's data, and nothing more: read,
// insert, update and delete the rows of every table of its public schema, use
// its sequences and execute its functions; likewise for what the database's
// owner creates there later (default privileges). It does not let role create,
// alter or drop anything. The server must be running.
func (c *Cluster) GrantAccess(ctx context.Context, dbname, role string) error {
	err := c.withDB(ctx, dbname, func(db *sql.DB) error {
		var owner string
		if err := db.QueryRowContext(ctx,
			"SELECT datdba::regrole::text FROM pg_database WHERE datname = current_database()").Scan(&owner); err != nil {
			return err
		}
		r := pq.QuoteIdentifier(role)
		defaults := "ALTER DEFAULT PRIVILEGES FOR ROLE " + owner + " IN SCHEMA public GRANT "
		stmts := []string{
			"GRANT CONNECT, TEMPORARY ON DATABASE " + pq.QuoteIdentifier(dbname) + " TO " + r,
			"GRANT USAGE ON SCHEMA public TO " + r,
			"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO " + r,
			"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO " + r,
			"GRANT EXECUTE ON ALL ROUTINES IN SCHEMA public TO " + r,
			defaults + "SELECT, INSERT, UPDATE, DELETE ON TABLES TO " + r,
			defaults + "USAGE, SELECT ON SEQUENCES TO " + r,
			defaults + "EXECUTE ON ROUTINES TO " + r,
		}
		_, err := db.ExecContext(ctx, strings.Join(stmts, ";\n"))
		return err
	})
	if err != nil {
		return fmt.Errorf("grant %s access to database %s: %w", role, dbname, err)
	}
	return nil
}

// withDB runs fn on a connection pool to database dbname as the superuser.
func (c *Cluster) withDB(ctx context.Context, dbname string, fn func(*sql.DB) error) error {
	db, err := sql.Open("postgres", c.URL(dbname))
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(db)
}
