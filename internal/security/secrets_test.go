package security_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lock"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// Secret-looking strings: none may show up where these tests look.
const (
	secretPassword = "pw-Secret-5f1c2e"
	wrongPassword  = "pw-Wrong-0a9b8c"
	secretToken    = "tok-Secret-8d4b7a"
)

// failFast makes a client give up at once on a refused connection.
func failFast(o *redis.Options) {
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.DialTimeout = time.Second
}

// TestNoSecretsEchoed checks that errors returned by guard and lock, and the
// errors they hand to hooks, never hold the Redis password or the caller's
// key, and that the HTTP middleware's headers never hold the URL, the key
// or a token from the request.
func TestNoSecretsEchoed(t *testing.T) {
	t.Run("errors", func(t *testing.T) {
		srv := redistest.Start(t, redistest.WithPassword(secretPassword))
		key := "session:" + secretToken
		good := srv.Client(t, failFast)
		// Held while the server is up, to try its handle once it is down.
		holder := lock.New(good, lock.Options{})
		t.Cleanup(func() { _ = holder.Close() })
		held, err := holder.Obtain(t.Context(), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}

		t.Run("wrong password", func(t *testing.T) {
			wrong := srv.Client(t, failFast, func(o *redis.Options) { o.Password = wrongPassword })
			errs := failingCalls(t, wrong, key)
			if !strings.Contains(errs[0].Error(), "WRONGPASS") {
				t.Errorf("first error %q is not about the password: not the path this test means", errs[0])
			}
		})

		t.Run("key too long", func(t *testing.T) {
			long := strings.Repeat(secretToken, guard.MaxKeyBytes/len(secretToken)+1)
			g, err := guard.New(good, guard.Options{RedisTimeout: redisTimeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = g.Close() })
			c := lock.New(good, lock.Options{})
			t.Cleanup(func() { _ = c.Close() })
			ctx := t.Context()
			_, errDo := g.Do(ctx, long, func(context.Context) ([]byte, error) { return []byte("v"), nil })
			_, errObtain := c.Obtain(ctx, long, time.Second)
			_, errReentrant := c.ObtainReentrant(ctx, long, "owner", time.Second)
			for what, err := range map[string]error{
				"guard Do":             errDo,
				"guard Invalidate":     g.Invalidate(ctx, long),
				"lock Obtain":          errObtain,
				"lock ObtainReentrant": errReentrant,
			} {
				if err == nil || !strings.Contains(err.Error(), "exceeds MaxKeyBytes") {
					t.Errorf("%s with a key of %d bytes: %v, want a too-long key error", what, len(long), err)
					continue
				}
				noSecrets(t, what, err.Error())
			}
		})

		t.Run("server down", func(t *testing.T) {
			srv.Kill(t)
			errs := failingCalls(t, good, key)
			if !strings.Contains(errs[0].Error(), "connect") {
				t.Errorf("first error %q is not a dial failure: not the path this test means", errs[0])
			}
			ctx := t.Context()
			_, errTTL := held.TTL(ctx)
			for what, err := range map[string]error{
				"Lock.TTL":     errTTL,
				"Lock.Refresh": held.Refresh(ctx, time.Minute),
				"Lock.Release": held.Release(ctx),
			} {
				if err == nil || errors.Is(err, lock.ErrNotHeld) {
					t.Errorf("%s with the server down: %v, want Redis's error", what, err)
					continue
				}
				noSecrets(t, what, err.Error())
			}
		})
	})

	t.Run("HTTP headers", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.Client(t, failFast)
		g, err := guard.New(rdb, guard.Options{RedisTimeout: redisTimeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		h := guardhttp.Middleware(g, guardhttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "account page")
		}))
		target := "/account/" + secretToken + "?access_token=" + secretToken + "&view=full"
		get := func(auth string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodGet, target, nil)
			if auth != "" {
				r.Header.Set("Authorization", auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			return rec
		}
		var responses []http.Header
		for _, step := range []struct {
			name, auth, status string
		}{
			{"miss", "", "stampede; fwd=miss; stored"},
			{"hit", "", "stampede; hit"},
			{"bypass", "Bearer " + secretToken, "stampede; fwd=bypass"},
		} {
			rec := get(step.auth)
			if rec.Code != http.StatusOK || rec.Body.String() != "account page" {
				t.Fatalf("%s: %d %q", step.name, rec.Code, rec.Body)
			}
			if got := rec.Header().Get("Cache-Status"); got != step.status {
				t.Errorf("%s: Cache-Status %q, want %q", step.name, got, step.status)
			}
			responses = append(responses, rec.Header())
		}

		// The key names in Redis: the guard key is a hash of the request,
		// so neither the token nor the path is written there.
		keys, err := srv.Client(t).Keys(t.Context(), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		var guardKeys []string
		for _, k := range keys {
			if strings.Contains(k, secretToken) || strings.Contains(k, "account") {
				t.Errorf("Redis key %q holds the URL", k)
			}
			if i, j := strings.IndexByte(k, '{'), strings.LastIndexByte(k, '}'); i >= 0 && j > i {
				guardKeys = append(guardKeys, k[i+1:j])
			}
		}
		if len(guardKeys) == 0 {
			t.Fatalf("no cache entry in Redis (keys %q)", keys)
		}

		// With Redis gone, the degraded answer says so, and nothing more.
		srv.Kill(t)
		rec := get("")
		if rec.Code != http.StatusOK || rec.Body.String() != "account page" {
			t.Fatalf("Redis down: %d %q", rec.Code, rec.Body)
		}
		responses = append(responses, rec.Header())

		fixed := []string{
			"stampede; hit", "stampede; fwd=stale", "stampede; fwd=miss; stored", "stampede; fwd=miss; collapsed",
			"stampede; fwd=miss; detail=degraded", "stampede; fwd=miss", "stampede; fwd=bypass",
		}
		for i, hdr := range responses {
			if cs := hdr.Get("Cache-Status"); !slices.Contains(fixed, cs) {
				t.Errorf("response %d: Cache-Status %q is not one of the fixed values", i+1, cs)
			}
			for name, vals := range hdr {
				for _, v := range vals {
					what := fmt.Sprintf("response %d: header %s: %q", i+1, name, v)
					noSecrets(t, what, name+": "+v)
					for _, s := range append([]string{"/account", "access_token"}, guardKeys...) {
						if strings.Contains(v, s) {
							t.Errorf("%s holds %q", what, s)
						}
					}
				}
			}
		}
	})
}

// failingCalls makes every guard and lock call that reaches Redis through
// rdb, which must fail, and checks that none of the errors returned or
// handed to Hooks.RedisError holds a secret. It returns the errors, first
// the one the guard reported through Hooks.RedisError.
func failingCalls(t *testing.T, rdb *redis.Client, key string) []error {
	t.Helper()
	ctx := t.Context()
	var (
		mu       sync.Mutex
		hookErrs []error
	)
	g, err := guard.New(rdb, guard.Options{
		RedisTimeout: redisTimeout,
		Hooks: guard.Hooks{RedisError: func(op string, err error) {
			mu.Lock()
			hookErrs = append(hookErrs, fmt.Errorf("Hooks.RedisError(%s): %w", op, err))
			mu.Unlock()
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	c := lock.New(rdb, lock.Options{})
	t.Cleanup(func() { _ = c.Close() })

	res, err := g.Do(ctx, key, func(context.Context) ([]byte, error) { return []byte("v"), nil })
	checkResult(t, "guard Do without Redis", res, err, "v", guard.Degraded)
	mu.Lock()
	errs := slices.Clone(hookErrs)
	mu.Unlock()
	if len(errs) == 0 {
		t.Fatal("a degraded guard call reported no Redis error")
	}
	errs = append(errs, fmt.Errorf("guard Invalidate: %w", g.Invalidate(ctx, key)))
	for _, o := range []struct {
		what   string
		obtain func() (*lock.Lock, error)
	}{
		{"Obtain", func() (*lock.Lock, error) { return c.Obtain(ctx, key, time.Second) }},
		{"Obtain WaitFor", func() (*lock.Lock, error) {
			return c.Obtain(ctx, key, time.Second, lock.WaitFor(100*time.Millisecond))
		}},
		{"ObtainReentrant", func() (*lock.Lock, error) { return c.ObtainReentrant(ctx, key, "owner", time.Second) }},
	} {
		_, err := o.obtain()
		if err == nil || errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("%s without Redis: %v, want Redis's error", o.what, err)
		}
		errs = append(errs, fmt.Errorf("%s: %w", o.what, err))
	}
	for _, err := range errs {
		if errors.Unwrap(err) == nil {
			t.Errorf("%v: no error", err)
			continue
		}
		noSecrets(t, "error", err.Error())
	}
	return errs
}

// noSecrets fails t if s holds the password, the wrong password tried, or
// the secret token (which every key and URL of these tests holds).
func noSecrets(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range []string{secretPassword, wrongPassword, secretToken} {
		if strings.Contains(s, secret) {
			t.Errorf("%s: %q shows %q", what, s, secret)
		}
	}
}
