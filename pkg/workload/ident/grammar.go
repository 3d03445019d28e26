package ident

// A level's grammar says how its cgroups are recognised in their paths, as
// data in its row of the kinds table; workload.Parser walks every row's
// grammar and knows no layout itself.
//
// A path is read one component at a time, from the root down. For each
// component the parser tries the rules of every grammar, the grammars in
// the order of their Rank and then of the table, a grammar's rules in
// their order, and applies the first rule whose conditions hold and whose
// component matches; a component no rule takes is, inside a workload, one
// more piece of it (Identity.Part). What a rule knows of the components
// before it is the context the previous one left (Then, After) and the
// flags raised so far (Raise, If, Unless).

// Grammar is a level's path grammar.
type Grammar struct {
	// Rank orders the grammars: RankFirst for layouts whose broad
	// patterns must win over everyone else's (Slurm's root and step
	// daemon scope), RankLast for the weakest (systemd units, which any
	// other layout's cgroup may also look like).
	Rank  Rank
	Rules []Rule
	// Finish, when set, completes the identity once the whole path is
	// read (a pod's QoS class when its path names none).
	Finish func(Identity) Identity
}

// Rank orders grammars; the zero value is the middle.
type Rank int

// Ranks, in the order the parser tries them.
const (
	RankFirst  Rank = -1
	RankNormal Rank = 0
	RankLast   Rank = 1
)

// Flags the parser itself knows. Rules raise and test any others by name
// ("slurm", "kube").
const (
	// FlagStrong is raised by the rules that start a workload other than
	// a systemd unit: below one, a unit is a piece of it rather than a
	// workload of its own, and the weakest rules say Unless: FlagStrong.
	FlagStrong = "strong"
	// FlagWorkload holds while the cgroup is in a workload (its Kind is
	// not KindCgroup). Rules test it; none raises it.
	FlagWorkload = "workload"
)

// Rule recognises one path component and says what it makes of the cgroup.
type Rule struct {
	// Is matches a component equal to one of these; Pattern one that
	// one of these regular expressions matches (in full: anchor them),
	// the first that matches giving the groups ($name) that Set, ID and
	// Part read. Exactly one of the two is set.
	Is      []string
	Pattern []string
	// Slot names Pattern for a parser's configuration, which may replace
	// it (workload.Config: Slurm's patterns); "" for none. Every rule of
	// one slot has the same Pattern.
	Slot string
	// Optional are the groups a template may name that a pattern need not
	// have (they read ""); every other group a template names must be in
	// every pattern, or the parser refuses the pattern.
	Optional []string

	// After lists the contexts the previous component must have left;
	// nil for any.
	After []string
	// If lists flags that must be raised, Unless flags that must not be.
	If, Unless []string

	// Start makes the component's cgroup the innermost workload, of this
	// kind, by Manager: its ID, Name and Part are cleared (Set gives
	// them), and the pieces read below it so far are forgotten.
	Start   Kind
	Manager string
	// Plain makes the cgroup no workload's but this manager's (Kind
	// KindCgroup), keeping its other fields.
	Plain string
	// Set gives fields their values.
	Set []Set
	// Part, when the cgroup is in a workload, is one more piece of it
	// (a template: "$0" the component itself).
	Part string
	// Raise raises flags for the rest of the path.
	Raise []string
	// Then is the context the component leaves for the next; "" none.
	Then string
}

// Set gives one field of the identity a value.
type Set struct {
	Field Field
	// Value is a template: text, $0 for the whole component, $name or
	// ${name} for a group of the rule's pattern.
	Value string
	// Decode, when set, decodes the value.
	Decode Decode
	// Only, when set, is a regular expression the value must match (in
	// full: anchor it), else the field is set to "".
	Only string
	// NonEmpty leaves the field as it is when the value is "".
	NonEmpty bool
}

// Decode is how a value is decoded before it is set.
type Decode int

// Decodings.
const (
	DecodeNone Decode = iota
	// DecodeUnit decodes systemd's \xNN escapes in a unit name.
	DecodeUnit
	// DecodeDashes turns '_' into '-' (the systemd cgroup driver's
	// spelling of a pod uid).
	DecodeDashes
)

// Field names a string field of Identity.
type Field int

// The fields a rule may set.
const (
	FieldID Field = iota
	FieldName
	FieldPart
	FieldManager
	FieldUID
	FieldUser
	FieldPodUID
	FieldPod
	FieldNamespace
	FieldContainer
	FieldQoS
	FieldJobID
	FieldSLUID
	FieldStep
	FieldTask
	FieldSlurmNode
	FieldVMName
	FieldVMUUID
	FieldDomainID
	FieldInstance
	fieldCount
)

// Ref returns the address of field f of id (nil for an unknown f).
func (id *Identity) Ref(f Field) *string {
	switch f {
	case FieldID:
		return &id.ID
	case FieldName:
		return &id.Name
	case FieldPart:
		return &id.Part
	case FieldManager:
		return &id.Manager
	case FieldUID:
		return &id.UID
	case FieldUser:
		return &id.User
	case FieldPodUID:
		return &id.PodUID
	case FieldPod:
		return &id.Pod
	case FieldNamespace:
		return &id.Namespace
	case FieldContainer:
		return &id.Container
	case FieldQoS:
		return &id.QoS
	case FieldJobID:
		return &id.JobID
	case FieldSLUID:
		return &id.SLUID
	case FieldStep:
		return &id.Step
	case FieldTask:
		return &id.Task
	case FieldSlurmNode:
		return &id.SlurmNode
	case FieldVMName:
		return &id.VMName
	case FieldVMUUID:
		return &id.VMUUID
	case FieldDomainID:
		return &id.DomainID
	case FieldInstance:
		return &id.Instance
	}
	return nil
}

// KindGrammar is one row's grammar.
type KindGrammar struct {
	Kind    Kind
	Grammar Grammar
}

// Grammars returns the rows' grammars, in the table's order.
func Grammars() []KindGrammar { return kinds.grammars() }

func (t kindTable) grammars() []KindGrammar {
	out := make([]KindGrammar, 0, len(t))
	for _, r := range t {
		out = append(out, KindGrammar{Kind: r.kind, Grammar: r.grammar})
	}
	return out
}
