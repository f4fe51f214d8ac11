package kube

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRESTConfigOrder: the order the commands' --kubeconfig help states:
// the path, else $KUBECONFIG (the in-cluster config and ~/.kube/config come
// after, where a test cannot put them); --context picks a context.
func TestRESTConfigOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, server string) string {
		path := filepath.Join(dir, name)
		cfg := `apiVersion: v1
kind: Config
current-context: a
clusters:
- {name: a, cluster: {server: "https://` + server + `"}}
- {name: b, cluster: {server: "https://other.` + server + `"}}
users:
- {name: u, user: {token: t}}
contexts:
- {name: a, context: {cluster: a, user: u}}
- {name: b, context: {cluster: b, user: u}}
`
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	flag, env := write("flag", "flag.example:6443"), write("env", "env.example:6443")
	t.Setenv("KUBECONFIG", env)
	for _, tc := range []struct{ path, context, want string }{
		{flag, "", "https://flag.example:6443"},
		{"", "", "https://env.example:6443"},
		{"", "b", "https://other.env.example:6443"},
		{flag, "b", "https://other.flag.example:6443"},
	} {
		cfg, err := RESTConfig(tc.path, tc.context)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != tc.want {
			t.Errorf("RESTConfig(%q, %q) = %s, want %s", tc.path, tc.context, cfg.Host, tc.want)
		}
	}
	if _, err := RESTConfig(flag, "missing"); err == nil {
		t.Error("a context the kubeconfig lacks: no error")
	}
}
