package api

// ProblemClassCodes returns the status of every error class by its code, for the
// tests of package api_test.
func ProblemClassCodes() map[string]int {
	out := make(map[string]int, len(problemClasses))
	for _, c := range problemClasses {
		out[c.code] = c.status
	}
	return out
}
