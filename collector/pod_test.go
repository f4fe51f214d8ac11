package collector

import "testing"

func TestSanitizeLabel(t *testing.T) {
	for in, want := range map[string]string{
		"app":                    "app",
		"app.kubernetes.io/name": "app_kubernetes_io_name",
		"9lives":                 "_lives",
		"team-name":              "team_name",
		"v2":                     "v2",
		"équipe":                 "__quipe",
	} {
		if got := sanitizeLabel(in); got != want {
			t.Errorf("sanitizeLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
