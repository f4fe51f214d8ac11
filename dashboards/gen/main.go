// Command gen writes dra-exporter's Grafana dashboards to a directory
// (dashboards/ by default): `make dashboards`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dra-exporter/dra-exporter/dashboards"
)

func main() {
	dir := flag.String("dir", "dashboards", "directory to write the JSON files to")
	flag.Parse()
	for _, d := range dashboards.All() {
		out, err := d.JSON()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		path := filepath.Join(*dir, d.File)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(path)
	}
}
