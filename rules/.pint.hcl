# pint (github.com/cloudflare/pint) configuration for the rule bundle.
# pint is pinned in tools/pint; lint from the repository root with:
#
#   (cd tools/pint && go tool pint --offline --config ../../rules/.pint.hcl lint ../../rules)
#
# rules/rules_test.go checks the same conventions (and more: metric names,
# runbook anchors, promtool coverage); pint adds its own PromQL checks.

parser {
  # The rule files, not the promtool tests in rules/tests/.
  include = ["(.*/)?rules/[^/]+\\.yaml"]
  names   = "legacy"
}

rule {
  match {
    kind = "alerting"
  }

  name "DRA[A-Z][A-Za-z0-9]+" {
    comment  = "Alert names are CamelCase with the DRA prefix."
    severity = "bug"
  }

  label "severity" {
    comment  = "Every alert has a severity: info, warning or critical."
    severity = "bug"
    values   = ["info", "warning", "critical"]
    required = true
  }

  annotation "summary" {
    severity = "bug"
    required = true
  }

  annotation "description" {
    severity = "bug"
    required = true
  }

  annotation "runbook_url" {
    comment  = "Every alert links to its section of docs/runbooks.md."
    severity = "bug"
    value    = "https://github\\.com/dra-exporter/dra-exporter/blob/main/docs/runbooks\\.md#dra[a-z0-9]+"
    required = true
  }
}

rule {
  match {
    kind = "recording"
  }

  name "[a-z][a-z0-9_]*:[A-Za-z_][A-Za-z0-9_]*:[a-z][a-z0-9_]*" {
    comment  = "Recording rules are named level:metric:operations."
    severity = "bug"
  }
}
