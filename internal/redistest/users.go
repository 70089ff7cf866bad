package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// user is an ACL user this package creates on a server.
type user struct {
	name, password string
	rules          []string
}

// setUserArgs returns the ACL SETUSER command that defines u from scratch.
func (u user) setUserArgs() []any {
	// reset first, so the rules given are all the user has: a user created
	// again after a restart, or redefined, keeps nothing from before.
	args := []any{"ACL", "SETUSER", u.name, "reset", "on"}
	if u.password == "" {
		args = append(args, "nopass")
	} else {
		args = append(args, ">"+u.password)
	}
	for _, r := range u.rules {
		args = append(args, r)
	}
	return args
}

// WithUser creates the ACL user name when the server starts, and again on
// every [Server.Restart]. The user is defined from scratch: ACL SETUSER
// name reset on >password rules... ("nopass" when password is empty), so
// it has exactly the given rules, for example
//
//	WithUser("app", "pw", "~app:*", "&app:*", "+get", "+set")
//
// Get a client authenticated as the user with [Server.UserClient]. The
// default user cannot be set this way (this package administers the server
// as that user): give it a password with [WithPassword].
func WithUser(name, password string, rules ...string) Option {
	return func(c *config) {
		c.users = setUser(c.users, user{name, password, slices.Clone(rules)})
	}
}

// setUser adds u to users, replacing a user of the same name.
func setUser(users []user, u user) []user {
	users = slices.DeleteFunc(slices.Clone(users), func(v user) bool { return v.name == u.name })
	return append(users, u)
}

// SetUser creates the ACL user name on the running server now, as
// [WithUser] would have at start, redefining it if it exists; the server
// also creates it again on every [Server.Restart]. It fails t if the
// server is not running, is frozen, or refuses the rules. On a shared
// server, use a name of your own (for example from [Key]).
func (s *Server) SetUser(t testing.TB, name, password string, rules ...string) {
	t.Helper()
	u := user{name, password, slices.Clone(rules)}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.proc == nil || s.proc.exited():
		t.Fatalf("redistest: SetUser on %s: server not running", s.Addr)
		return
	case s.frozen:
		t.Fatalf("redistest: SetUser on %s: server frozen", s.Addr)
		return
	}
	if err := s.applyUsers([]user{u}); err != nil {
		t.Fatalf("redistest: SetUser %q on %s: %v", name, s.Addr, err)
		return
	}
	s.users = setUser(s.users, u)
}

// allUsers returns the users to create at start: those of the options,
// then those added by SetUser (which win on a name clash). s.mu must be
// held.
func (s *Server) allUsers() []user {
	users := slices.Clone(s.cfg.users)
	for _, u := range s.users {
		users = setUser(users, u)
	}
	return users
}

// applyUsers runs ACL SETUSER for each user, as the default user.
func (s *Server) applyUsers(users []user) error {
	if len(users) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	admins := newAdmins()
	defer admins.close()
	a := admins.get(s)
	for _, u := range users {
		if u.name == "default" {
			// Resetting it would lock this package out; use WithPassword.
			return errors.New(`ACL user "default" cannot be set here; use WithPassword`)
		}
		// Redis's reply quotes the modifier it rejects, which may be the
		// password: the error names the user and redacts the password.
		if err := a.Do(ctx, u.setUserArgs()...).Err(); err != nil {
			return fmt.Errorf("ACL SETUSER %s: %w", u.name, redactPassword(err, u.password))
		}
	}
	return nil
}

// redactPassword hides password in err's message.
func redactPassword(err error, password string) error {
	if password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), password, "<password>"))
}

// UserClient returns a client of s that authenticates as the ACL user name
// (created with [WithUser] or [Server.SetUser]), set up like
// [Server.Client] otherwise: TLS when the server speaks it, closed by
// t.Cleanup. It fails t for an unknown user.
func (s *Server) UserClient(t testing.TB, name string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	s.mu.Lock()
	users := s.allUsers()
	s.mu.Unlock()
	i := slices.IndexFunc(users, func(u user) bool { return u.name == name })
	if i < 0 {
		t.Fatalf("redistest: UserClient: no user %q on %s (create it with WithUser or SetUser)", name, s.Addr)
		return nil
	}
	u := users[i]
	pw := u.password
	if pw == "" {
		// A nopass user accepts any password, but go-redis sends AUTH only
		// with a non-empty one (else the client is the default user).
		pw = "nopass"
	}
	return s.Client(t, append([]func(*redis.Options){func(o *redis.Options) {
		o.Username, o.Password = u.name, pw
	}}, opts...)...)
}
