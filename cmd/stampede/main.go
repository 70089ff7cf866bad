// Command stampede is the operator's tool for a fleet of stampede guards:
// it inspects what Redis holds for a key or a URL, invalidates keys, tags
// and URLs fleet-wide, watches fills, refreshes, invalidations and leases
// as they happen, ranks the fleet's hottest keys, and runs a coalescing
// HTTP proxy (a sidecar) in front of a service in any language.
//
//	stampede inspect -redis localhost:6379 -namespace catalog: user:42
//	stampede inspect -url 'GET https://shop.example/products/8'
//	stampede invalidate -tag user:42
//	stampede watch
//	stampede top
//	stampede proxy -upstream http://127.0.0.1:8081 -listen :8080 -admin :9090
//
// Every subcommand takes -redis (also REDIS_ADDR) and -namespace, and any
// flag can be set from the environment as STAMPEDE_ and its name in upper
// case, dashes as underscores (STAMPEDE_NAMESPACE, STAMPEDE_KEY_HOST).
// Only invalidate and proxy write to Redis. Exit status: 0 done, 1 failed
// (Redis unreachable, a key missing...), 2 a bad command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand: its flags, set up on fs, and its action.
type command struct {
	name, args, summary, example string
	setup                        func(fs *flag.FlagSet) action
}

// action runs a subcommand with its positional arguments, writing to out.
type action func(ctx context.Context, out io.Writer, args []string) error

var commands = []command{inspectCommand, invalidateCommand, watchCommand, topCommand, proxyCommand}

// usageError is a bad command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		topUsage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	var c *command
	for i := range commands {
		if commands[i].name == args[0] {
			c = &commands[i]
		}
	}
	if c == nil {
		fmt.Fprintf(stderr, "stampede: unknown command %q\n\n", args[0])
		topUsage(stderr)
		return 2
	}
	fs := flag.NewFlagSet("stampede "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	act := c.setup(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: stampede %s [flags] %s\n\n%s\n\nexample:\n  %s\n\nflags:\n", c.name, c.args, c.summary, c.example)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package printed why, and the usage
	}
	if err := fromEnv(fs); err != nil {
		fmt.Fprintf(stderr, "stampede %s: %s\n", c.name, printable(err.Error()))
		return 2
	}
	if f := flagAfterArgs(fs, args[1:]); f != "" {
		// The flag package stops at the first argument: "invalidate KEY
		// -namespace NS" would act on the keys "-namespace" and "NS", in
		// the default namespace (or on another Redis, for -redis).
		fmt.Fprintf(stderr, "stampede %s: flag %s after the arguments: put the flags first (or -- before arguments that start with -)\n", c.name, f)
		fs.Usage()
		return 2
	}
	err := act(ctx, stdout, fs.Args())
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "stampede %s: %s\n", c.name, printable(err.Error()))
		fs.Usage()
		return 2
	}
	// Error text may carry bytes from Redis (an error reply, a key).
	fmt.Fprintf(stderr, "stampede %s: %s\n", c.name, errorLines(err))
	return 1
}

// errorLines is err's text for a terminal: each of its lines (an
// errors.Join has several) made printable, the later ones indented.
func errorLines(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, "\n  ")
}

// flagAfterArgs returns the first of fs's remaining arguments that names
// one of its flags ("-name", "--name", "-name=v"), unless a "--" ended the
// flags in given, the command line fs parsed.
func flagAfterArgs(fs *flag.FlagSet, given []string) string {
	if endedFlags(fs, given) {
		return ""
	}
	for _, a := range fs.Args() {
		name, ok := strings.CutPrefix(a, "-")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "-")
		name, _, _ = strings.Cut(name, "=")
		if fs.Lookup(name) != nil {
			return a
		}
	}
	return ""
}

// endedFlags reports whether a "--" ended the flags in given, as fs
// parsed it: not one that was a flag's value ("-namespace --").
func endedFlags(fs *flag.FlagSet, given []string) bool {
	for i := 0; i < len(given); i++ {
		a := given[i]
		if a == "--" {
			return true
		}
		if len(a) < 2 || a[0] != '-' {
			return false
		}
		name := strings.TrimPrefix(a[1:], "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				continue
			}
		}
		i++ // the flag's value, whatever it is
	}
	return false
}

func topUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: stampede COMMAND [flags] [args]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, strings.SplitN(c.summary, "\n", 2)[0])
	}
	fmt.Fprintf(w, "\n`stampede COMMAND -h` shows a command's flags and an example. Every flag can be set\n"+
		"from the environment: STAMPEDE_NAMESPACE, STAMPEDE_KEY_HOST...; -redis also from REDIS_ADDR.\n")
}

// fromEnv sets each flag of fs not given on the command line from its
// environment variable, when set: STAMPEDE_ and the flag's name in upper
// case, dashes as underscores; -redis also from REDIS_ADDR.
func fromEnv(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok && f.Name == "redis" {
			name = "REDIS_ADDR"
			v, ok = os.LookupEnv(name)
		}
		if ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %v", name, v, e)
			}
		}
	})
	return err
}

// envName is the environment variable of the flag name.
func envName(name string) string {
	return "STAMPEDE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}
