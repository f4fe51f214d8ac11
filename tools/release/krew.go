package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// addURIAndSha is krew-release-bot's template action: the archive's URI
// and its sha256, which the bot computes by downloading it.
var addURIAndSha = regexp.MustCompile(`\{\{ ?addURIAndSha "([^"]+)" \.TagName ?\}\}`)

// renderKrew fills the krew-release-bot template (deploy/krew/) as the bot
// does, with the sha256 of the archives this run built: the manifest that
// `kubectl krew install --manifest=... --archive=...` takes, and the one
// the bot's pull request must match.
func renderKrew(template, version string, sums map[string]string) (string, error) {
	var missing []string
	text := addURIAndSha.ReplaceAllStringFunc(template, func(m string) string {
		uri := strings.ReplaceAll(addURIAndSha.FindStringSubmatch(m)[1], "{{ .TagName }}", version)
		sum, ok := sums[path.Base(uri)]
		if !ok {
			missing = append(missing, path.Base(uri))
		}
		return "uri: " + uri + "\n    sha256: " + sum
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("the krew manifest names archives this release did not build: %s", strings.Join(missing, ", "))
	}
	text = strings.ReplaceAll(text, "{{ .TagName }}", version)
	if strings.Contains(text, "{{") {
		return "", fmt.Errorf("the krew manifest has template actions krew-release-bot does not know")
	}
	return text, nil
}

func sha256File(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), nil
}

// writeChecksums writes files' sha256 in sha256sum's format (sha256sum -c
// reads it), sorted by name.
func writeChecksums(dir, name string, files []string) error {
	var b strings.Builder
	for _, f := range files {
		sum, err := sha256File(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, f)
	}
	return os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644)
}
