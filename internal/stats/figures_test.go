package stats

import (
	"reflect"
	"testing"

	"github.com/wattrace/wattrace/internal/snapshot"
)

// fill sets every number in v to n (recursively: slices get one element,
// pointers a value, strings "z", booleans true), so that each figure is
// non-zero.
func fill(v reflect.Value, n float64) {
	switch v.Kind() {
	case reflect.Float64:
		v.SetFloat(n)
	case reflect.Uint64, reflect.Uint32:
		v.SetUint(uint64(n))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(n))
	case reflect.String:
		v.SetString("z")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(v.Field(i), n)
		}
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fill(v.Index(i), n)
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), n)
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), n)
		v.Set(p)
	default:
		panic("fill: no case for " + v.Kind().String())
	}
}

func filled(n float64) figures {
	var f figures
	fill(reflect.ValueOf(&f).Elem(), n)
	return f
}

// Every method of figures handles every field: a figure added to the type
// but forgotten by one of them (so not merged, not rolled up, not copied
// into snapshots) fails here, naming the field.
func TestFiguresCoverEveryField(t *testing.T) {
	x := filled(2)
	typ := reflect.TypeOf(x)
	field := func(f *figures, i int) any { return reflect.ValueOf(f).Elem().Field(i).Interface() }
	double := filled(4)

	var sum figures
	sum.add(&x)
	sum.add(&x)
	var grown, kept figures
	x.growth(&figures{}, &grown)
	x.keep(&kept)
	clone := x.clone()
	var none figures
	var fromX figures
	double.growth(&x, &fromX)
	var c snapshot.Consumer
	var u snapshot.Workload
	x.clone().consumer(&c)
	x.clone().workload(&u)
	for i := 0; i < typ.NumField(); i++ {
		name := typ.Field(i).Name
		if got, want := field(&sum, i), field(&double, i); !reflect.DeepEqual(got, want) {
			t.Errorf("add: %s is %+v after adding %+v twice, want %+v", name, got, field(&x, i), want)
		}
		if got, want := field(&grown, i), field(&x, i); !reflect.DeepEqual(got, want) {
			t.Errorf("growth: %s grew by %+v from nothing, want %+v", name, got, want)
		}
		if got, want := field(&fromX, i), field(&x, i); !reflect.DeepEqual(got, want) {
			t.Errorf("growth: %s grew by %+v from half, want %+v", name, got, want)
		}
		if got, want := field(&kept, i), field(&x, i); !reflect.DeepEqual(got, want) {
			t.Errorf("keep: %s is %+v, want %+v", name, got, want)
		}
		if got, want := field(&clone, i), field(&x, i); !reflect.DeepEqual(got, want) {
			t.Errorf("clone: %s is %+v, want %+v", name, got, want)
		}
		if got := field(&none, i); reflect.DeepEqual(got, field(&x, i)) {
			t.Fatalf("fill left %s zero", name)
		}
		for what, v := range map[string]reflect.Value{"consumer": reflect.ValueOf(c), "workload": reflect.ValueOf(u)} {
			f := v.FieldByName(name)
			if !f.IsValid() {
				t.Errorf("snapshot's %s has no field %s", what, name)
				continue
			}
			if got, want := f.Interface(), field(&x, i); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: published %s %+v, want %+v", what, name, got, want)
			}
		}
	}
	// The snapshot's copies share nothing with the loop's figures: a later
	// step that grows them must not change a published snapshot.
	kept.add(&x)
	x.add(&x)
	for i := 0; i < typ.NumField(); i++ {
		name := typ.Field(i).Name
		if got, want := field(&clone, i), field(&grown, i); !reflect.DeepEqual(got, want) {
			t.Errorf("clone: %s changed with the original to %+v", name, got)
		}
		if got, want := reflect.ValueOf(c).FieldByName(name).Interface(), field(&grown, i); !reflect.DeepEqual(got, want) {
			t.Errorf("consumer: published %s changed with the loop's to %+v", name, got)
		}
	}
}
