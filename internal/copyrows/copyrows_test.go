package copyrows

import (
	"reflect"
	"testing"
)

// TestSource: the rows come in idx's order with each column's value, and
// Any tells a column that must be sent from one left to its default.
func TestSource(t *testing.T) {
	a, b := []string{"x", "y", "z"}, []int{10, 20, 30}
	names, src := New([]int{2, 0}, []Column{{"a", func(i int) any { return a[i] }}, {"b", func(i int) any { return b[i] }}})
	if !reflect.DeepEqual(names, []string{"a", "b"}) {
		t.Fatalf("names %v", names)
	}
	var got [][]any
	for src.Next() {
		v, err := src.Values()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, append([]any(nil), v...))
	}
	if want := [][]any{{"z", 30}, {"x", 10}}; !reflect.DeepEqual(got, want) || src.Err() != nil {
		t.Fatalf("rows %v, want %v", got, want)
	}
	if Any([]string{"", ""}, "") || !Any([]string{"", "k"}, "") || Any(nil, "{}") {
		t.Fatal("Any")
	}
}
