package skiplock_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock"
)

// dsnForms write a DSN from its parts, correctly escaped and not: the
// password as a user would paste it.
var dsnForms = []func(user, pw, host, db string) string{
	func(user, pw, host, db string) string {
		return (&url.URL{Scheme: "postgres", User: url.UserPassword(user, pw), Host: host, Path: "/" + db}).String()
	},
	func(user, pw, host, db string) string { return "postgres://" + user + ":" + pw + "@" + host + "/" + db },
	func(user, pw, host, db string) string {
		return "postgresql://" + user + "@" + host + "/" + db + "?sslmode=disable&password=" + pw
	},
	func(user, pw, host, db string) string {
		return "host=" + host + " user=" + user + " password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "' dbname=" + db
	},
	func(user, pw, host, db string) string {
		return "host=" + host + " user=" + user + " password=" + pw + " dbname=" + db
	},
	func(user, pw, host, db string) string {
		return "host=" + host + " user=" + user + " password = '" + pw + "' dbname=" + db + " sslmode=disabled"
	},
	func(user, pw, host, db string) string { return "user=" + user + " password=" + pw + " host=" + host },
}

// leaked returns a piece of pw, 4 bytes or longer, that out shows and that
// background (the text around the password) does not explain, or "".
func leaked(out, pw, background string) string {
	for n := len(pw); n >= 4; n-- {
		for i := 0; i+n <= len(pw); i++ {
			if w := pw[i : i+n]; strings.Contains(out, w) && !strings.Contains(background, w) {
				return w
			}
		}
	}
	return ""
}

// redactOutputs is every text the library makes of dsn: RedactDSN, the
// error for a DSN the driver refuses, and a connect error that repeats all
// the driver parsed, the password included.
func redactOutputs(dsn string) []string {
	outs := []string{skiplock.RedactDSN(dsn)}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return append(outs, skiplock.RedactDSNError(fmt.Errorf("connect: %w", err), dsn).Error())
	}
	var params []string
	for k, v := range cfg.RuntimeParams {
		params = append(params, k+"="+v)
	}
	connErr := fmt.Errorf("failed to connect to `user=%s database=%s`: %s:%d (%s): server error: password %q was wrong %v", cfg.User, cfg.Database, cfg.Host, cfg.Port, cfg.Host, cfg.Password, params)
	return append(outs, skiplock.RedactDSNError(connErr, dsn).Error(), skiplock.RedactDSNError(fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "28P01", Message: connErr.Error()}), dsn).Error())
}

// FuzzRedactDSN: whatever the password and however it is written, escaped
// or not, no piece of it of 4 bytes or more shows in any text the library
// makes of the DSN.
func FuzzRedactDSN(f *testing.F) {
	for _, pw := range []string{"it's@Tail", `a' bcde`, "ab:cd/ef#gh%ij", "1234/5678", "1234#5678", "pa ss wo rd", `back\slash`, "p%41ssword", "s3cret", "@@@@", "x=y z=w", "''''"} {
		for form := range dsnForms {
			f.Add("leaky", pw, "127.0.0.1:5", "postgres", uint8(form))
		}
	}
	// The library's own words, which no password may be blamed for.
	var words strings.Builder
	for _, d := range []string{"postgres://u@h/db", "host=h port=x", "postgres://u:p@h@h/db", "host='x"} {
		for _, s := range redactOutputs(d) {
			words.WriteString(s + "\n")
		}
	}
	words.WriteString(skiplock.RedactDSNError(errors.New("x"), "postgres://u:p@h@h/db").Error())
	f.Fuzz(func(t *testing.T, user, pw, host, db string, form uint8) {
		write := dsnForms[int(form)%len(dsnForms)]
		dsn := write(user, pw, host, db)
		background := words.String() + write(user, "", host, db)
		if len(pw) < 4 || leaked(pw, pw, background) != "" {
			return // the password is all around it anyway
		}
		for _, out := range redactOutputs(dsn) {
			if w := leaked(out, pw, background); w != "" {
				t.Fatalf("DSN %q: output shows %q of password %q:\n%s", dsn, w, pw, out)
			}
		}
	})
}
