package main

import (
	"fmt"
	"strings"
)

// exitCode is one exit status of a command and what it means: the
// command's help and the docs' tables are rendered from these lists (a
// test holds docs/gates.md and docs/flags.md to them).
type exitCode struct {
	code    int
	meaning string
}

var gatesExitCodes = []exitCode{
	{gatesPass, "PASS: every gate of every pod passed for the whole window and the negative controls held (at least one, unless --no-require-negative-control)"},
	{gatesFail, "FAIL: a gate or a negative control failed (broken, or invalid); the verdict names the most pressing cause and its owner, then each other cause"},
	{gatesUsage, "usage error"},
	{gatesError, "CANNOT_JUDGE, or the evidence could not be read: no pod to judge, a Prometheus that does not evaluate rules/gates.yaml, a query or a bundle that failed; no team is blamed"},
	{gatesPartial, "PARTIAL: every gate evaluated passed and the controls held, but a gate was not evaluated (gates --from: the workload gate needs Prometheus); never a promotion"},
}

var explainExitCodes = []exitCode{
	{explainReady, "the pod is Ready and no link blocks it; a negative control HOLDS"},
	{explainBlocked, "the pod is not Ready (BLOCKED, WAITING, or finished); a negative control is BROKEN or INVALID"},
	{explainUsage, "usage error"},
	{explainUnreadable, "the cluster or the files could not be read, or the pod is not there"},
}

// exitHelp is the sentence a command's help ends with.
func exitHelp(codes []exitCode) string {
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d %s", c.code, c.meaning)
	}
	return "Exit status: " + strings.Join(parts, "; ") + "."
}

// exitTable is the Markdown table of the docs.
func exitTable(codes []exitCode) string {
	b := &strings.Builder{}
	b.WriteString("| Exit | Meaning |\n|---|---|\n")
	for _, c := range codes {
		fmt.Fprintf(b, "| %d | %s |\n", c.code, c.meaning)
	}
	return b.String()
}
