package skiplock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/usage"
)

// How a DSN is shown when it cannot be shown safely.
const (
	dsnHidden = "(DSN not shown: it does not parse unambiguously, so any part of it could be its password)"
	mask      = "xxxxx"
)

// dsnView is what may be shown of a DSN.
type dsnView struct {
	// url is true for postgres:// and postgresql:// DSNs, which the driver
	// parses as URLs; everything else it parses as keyword/value pairs.
	url bool
	// shown is the DSN with its secrets masked, "" when the DSN does not
	// parse unambiguously and no part of it may be shown.
	shown string
	// trusted says the driver reads the DSN as shown does: the text of its
	// errors (hosts, user, database) holds no piece of the password, bar
	// the secrets below, which are scrubbed.
	trusted bool
	// secrets are the password and sslpassword, as parsed and as written.
	secrets []string
}

// inspectDSN parses dsn independently of the driver, strictly (net/url for
// URLs, the driver's own keyword/value rules otherwise), and checks that
// the driver reads the same password, user and database. Only then is the
// DSN shown, with its secrets masked.
func inspectDSN(dsn string) dsnView {
	v := dsnView{url: strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")}
	var user, db, pw string
	var hasUser, hasDB, ok bool
	if v.url {
		v.shown, user, db, pw, hasUser, hasDB, v.secrets, ok = inspectURL(dsn)
	} else {
		v.shown, user, db, pw, hasUser, hasDB, v.secrets, ok = inspectKV(dsn)
	}
	if !ok {
		return dsnView{url: v.url}
	}
	cfg, err := pgconn.ParseConfig(dsn)
	v.trusted = err == nil && (pw == "" || cfg.Password == pw) && (!hasUser || cfg.User == user) && (!hasDB || cfg.Database == db)
	if err == nil && !v.trusted {
		// The driver splits the DSN otherwise: what is shown could hold a
		// piece of the password.
		return dsnView{url: v.url}
	}
	return v
}

// inspectURL parses a URL DSN with net/url, which refuses what libpq-style
// parsing would split at a guess: an unescaped @, #, / or % in the
// userinfo. An @ anywhere but as the userinfo's end, or a # anywhere, makes
// the DSN ambiguous.
func inspectURL(dsn string) (shown, user, db, pw string, hasUser, hasDB bool, secrets []string, ok bool) {
	u, err := url.Parse(dsn)
	if err != nil || u.Opaque != "" || strings.ContainsAny(dsn, "#\x00") {
		return
	}
	if n := strings.Count(dsn, "@"); n > 1 || n == 1 && u.User == nil {
		return
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return
	}
	if u.User != nil {
		user, hasUser = u.User.Username(), u.User.Username() != ""
		if p, set := u.User.Password(); set {
			// The only @ ends the userinfo; the password as written is
			// what follows its first colon.
			userinfo := dsn[strings.Index(dsn, "://")+3 : strings.IndexByte(dsn, '@')]
			_, raw, _ := strings.Cut(userinfo, ":")
			pw, secrets = p, append(secrets, raw)
			u.User = url.UserPassword(user, mask)
		}
	}
	for _, pair := range strings.Split(u.RawQuery, "&") {
		k, raw, _ := strings.Cut(pair, "=")
		if k, err := url.QueryUnescape(k); err == nil && (k == "password" || k == "sslpassword") {
			secrets = append(secrets, raw)
		}
	}
	if qu := q.Get("user"); qu != "" {
		user, hasUser = qu, true
	}
	if db = strings.TrimPrefix(u.Path, "/"); db != "" {
		hasDB = true
	}
	if qd := q.Get("dbname"); qd != "" {
		db, hasDB = qd, true
	}
	for _, k := range []string{"password", "sslpassword"} {
		if vals, set := q[k]; set {
			secrets = append(secrets, vals...)
			if k == "password" {
				pw = vals[len(vals)-1]
			}
			q[k] = []string{mask}
		}
	}
	secrets = append(secrets, pw)
	u.RawQuery = q.Encode()
	return u.String(), user, db, pw, hasUser, hasDB, secrets, true
}

// inspectKV parses a keyword/value DSN by the driver's rules (pgconn's
// parseKeywordValueSettings, after libpq): values may be single-quoted,
// and a backslash escapes the next character, in quotes or not.
func inspectKV(dsn string) (shown, user, db, pw string, hasUser, hasDB bool, secrets []string, ok bool) {
	if strings.IndexByte(dsn, 0) >= 0 {
		return
	}
	const spaces = " \t\n\r\v\f"
	var out []string
	s := strings.TrimLeft(dsn, spaces)
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return
		}
		key := strings.Trim(s[:eq], spaces)
		if key == "" || strings.ContainsAny(key, spaces) {
			return
		}
		s = strings.TrimLeft(s[eq+1:], spaces)
		var raw string
		switch {
		case s == "":
		case s[0] != '\'':
			end := 0
			for ; end < len(s) && !strings.ContainsRune(spaces, rune(s[end])); end++ {
				if s[end] == '\\' {
					if end++; end == len(s) {
						break
					}
				}
			}
			raw, s = s[:end], strings.TrimLeft(s[end:], spaces)
		default:
			end := 1
			for ; end < len(s) && s[end] != '\''; end++ {
				if s[end] == '\\' {
					end++
				}
			}
			if end >= len(s) {
				return // unterminated quoted string
			}
			raw, s = s[:end+1], strings.TrimLeft(s[end+1:], spaces)
		}
		val := raw
		if strings.HasPrefix(raw, "'") {
			val = raw[1 : len(raw)-1]
		}
		val = unescapeKV(val)
		switch key {
		case "password", "sslpassword":
			secrets = append(secrets, val, raw)
			if key == "password" {
				pw = val
			}
			out = append(out, key+"="+mask)
			continue
		case "user":
			if val != "" {
				user, hasUser = val, true
			}
		case "dbname", "database":
			db, hasDB = val, true
		}
		out = append(out, key+"="+quoteKV(val))
	}
	return strings.Join(out, " "), user, db, pw, hasUser, hasDB, secrets, true
}

// unescapeKV drops each backslash and keeps the character after it.
func unescapeKV(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			if i++; i == len(s) {
				break
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// quoteKV writes a keyword/value DSN value, quoted when it must be.
func quoteKV(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r\v\f'\\") {
		return v
	}
	return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), `'`, `\'`) + "'"
}

// RedactDSN returns the DSN with its password (and sslpassword) replaced by
// "xxxxx", in URL or keyword/value form, so that it can be logged. A DSN
// that does not parse, or that the driver would split differently than it
// reads (an unescaped @, #, / or % in a URL's password), is not shown at
// all: a placeholder says so.
func RedactDSN(dsn string) string {
	if v := inspectDSN(dsn); v.shown != "" {
		return v.shown
	}
	return dsnHidden
}

// RedactDSNError rebuilds err, an error that came out of connecting with
// dsn or parsing it, so that its text holds no part of the DSN's password.
// When the DSN parses unambiguously, the message is err's with the secrets
// scrubbed; otherwise the message is rebuilt from what kind of failure it
// was, since the driver's text (hosts, user names) could hold pieces of a
// password it split wrongly. errors.Is and errors.As still see err.
func RedactDSNError(err error, dsn string) error {
	if err == nil {
		return nil
	}
	var r *redactedError
	if errors.As(err, &r) {
		return err
	}
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		return dsnParseError(dsn, func(s string) error { _, err := pgconn.ParseConfig(s); return err })
	}
	v := inspectDSN(dsn)
	if v.trusted {
		return &redactedError{msg: scrub(err.Error(), v.secrets), err: err}
	}
	if usage.Is(err) {
		// Ours, and never built from the DSN (see dsnParseError).
		return err
	}
	var what string
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		what = "timed out"
	case errors.Is(err, context.Canceled):
		what = "canceled"
	case errors.As(err, &dnsErr):
		what = "a host name in the DSN does not resolve"
	case errors.Is(err, syscall.ECONNREFUSED):
		what = "connection refused"
	case SQLState(err) == "28P01":
		what = "the server refused the password (SQLSTATE 28P01)"
	case SQLState(err) != "":
		what = "the server refused the connection (SQLSTATE " + SQLState(err) + ")"
	default:
		what = "failed"
	}
	return &redactedError{msg: fmt.Sprintf("connect: %s: check that the server is running and the DSN is right (details not shown, as the DSN does not parse unambiguously and they could show part of its password; %s)", what, dsnHint(v.url)), err: err}
}

// dsnParseError is the error for a DSN that parse (the driver's) refuses:
// the driver's message about the DSN with its secrets masked, never about
// the DSN itself, whose text the driver cannot always redact.
func dsnParseError(dsn string, parse func(string) error) error {
	v := inspectDSN(dsn)
	if v.shown == "" {
		return usage.Errorf("DSN does not parse, and it is not shown, as any part of it could be its password: %s", dsnHint(v.url))
	}
	if err := parse(v.shown); err != nil {
		return usage.Errorf("DSN does not parse: %s", scrub(err.Error(), v.secrets))
	}
	return usage.Errorf("DSN does not parse: its password does not: %s", dsnHint(v.url))
}

// dsnHint says how to write a DSN that parses unambiguously.
func dsnHint(isURL bool) string {
	if isURL {
		return "in postgres://user:password@host:port/database, percent-encode reserved characters in the user and password (@ %40, : %3A, / %2F, # %23, % %25, ? %3F, space %20)"
	}
	return "in key=value pairs, single-quote values with spaces or quotes, and escape ' and \\ inside them with a backslash, e.g. password='it\\'s'"
}

// scrub replaces every secret in s.
func scrub(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, mask)
		}
	}
	return s
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
