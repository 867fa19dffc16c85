package testenv

// PlanNode is a node of a Postgres plan in EXPLAIN (ANALYZE, FORMAT JSON)
// form, as EXPLAIN returns it and auto_explain logs it.
type PlanNode struct {
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Filtered float64    `json:"Rows Removed by Filter"`
	Rechecks float64    `json:"Rows Removed by Index Recheck"`
	Plans    []PlanNode `json:"Plans"`
}

// Examined is how many rows the plan read from tables and indexes, over
// every loop: what its scans returned and what any node read and threw
// away. Unlike a time it does not depend on the machine, so a test can
// bound it.
func (n PlanNode) Examined() int {
	total := n.Filtered + n.Rechecks
	if len(n.Plans) == 0 {
		total += n.Rows
	}
	total *= n.Loops
	for _, c := range n.Plans {
		total += float64(c.Examined())
	}
	return int(total)
}
