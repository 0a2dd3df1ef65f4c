package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// envName is the environment variable that sets a flag: CONFIGHASH_ and the flag name
// in upper snake case (--tls-cert-file: CONFIGHASH_TLS_CERT_FILE).
func envName(flagName string) string {
	return "CONFIGHASH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// reloaderEnv are the environment variables stakater/Reloader users already set for
// its alerts, read for the flag when neither it nor its own variable is set.
var reloaderEnv = map[string]string{
	"alert-on-reload":       "ALERT_ON_RELOAD",
	"alert-sink":            "ALERT_SINK",
	"alert-webhook-url":     "ALERT_WEBHOOK_URL",
	"alert-additional-info": "ALERT_ADDITIONAL_INFO",
	"alert-webhook-proxy":   "ALERT_WEBHOOK_PROXY",
}

// lookupEnv returns the flag's value from the environment: its own variable, or else
// Reloader's.
func lookupEnv(flagName string) (value, variable string, ok bool) {
	for _, name := range []string{envName(flagName), reloaderEnv[flagName]} {
		if v, ok := os.LookupEnv(name); ok && name != "" {
			return v, name, true
		}
	}
	return "", "", false
}

// parseFlags parses args, then sets every flag not given on the command line from its
// environment variable, if that is set. The command line wins. Flags shared with
// Reloader read its forms too (readReloaderForms).
func parseFlags(fs *flag.FlagSet, args []string, out io.Writer, summary string) error {
	readReloaderForms(fs)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "%s\n\nUsage: confighash %s [flags]\n\nFlags (each also set by the environment variable shown):\n", summary, fs.Name())
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (default %q)", f.DefValue)
			}
			env := "$" + envName(f.Name)
			if alias := reloaderEnv[f.Name]; alias != "" {
				env += ", $" + alias
			}
			fmt.Fprintf(out, "  --%s  [%s]%s\n      %s\n", f.Name, env, def, f.Usage)
		})
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		v, name, ok := lookupEnv(f.Name)
		if given[f.Name] || !ok || err != nil {
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = fmt.Errorf("$%s: %w", name, e)
		}
	})
	return err
}
