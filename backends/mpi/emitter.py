"""MPI backend lowering: the OpenMP lowering of one rank's part, plus what splitting the graph needs.

Each rank holds its owned nodes and, after them, the ghosts (remote in-neighbours of owned
nodes; morphgen.partition.layout).  Everything the OpenMP emitter decides stays; this subclass
adds, driven by the IR (docs/backends.md, "MPI"):

- a forward halo exchange before every op that reads a node value at edge sources
  (`aggregate` over in-edges, `gather` of sources, typed linears of source rows and their weight
  gradients; a gather that a fused kernel reads in place exchanges where it stood), so ghost
  rows hold their owners' rows; an aggregation runs its rows that read no ghost while its
  exchange travels;
- a reverse exchange after every op that writes partial sums into source rows (transposed
  aggregations, scatters to sources, the max aggregation's backward, the input gradient of a
  typed linear of source rows): ghost rows go to their owners, who add them (a mean over
  out-edges divides each rank's share by the global out-degree: the Graph's degrees); a max
  over out-edges sends each share's maxima with their edges, and the owners send back the edge
  that won;
- node-wise kernels on owned rows only (ghost rows come from exchanges, or are computed on every
  row for values each rank can compute itself), and sums over rows over owned rows only;
- each weight gradient handed to MPI_Iallreduce as soon as it is complete, the optimizer
  waiting for it before its step (Morphling's pipelined backward);
- degrees and GCN normalisation from the global graph, the loss as a mean over the global train
  count, accuracies from global counts, dropout masks keyed by global node and edge ids;
- a link-prediction loss: each rank scores its share of the triples on the embeddings of the
  whole graph, gathered from their owners, and the gradients go back to the owners.
"""
from __future__ import annotations

from typing import Optional

from morphgen.backends.openmp.emitter import TIMERS, OpenMPEmitter, UnsupportedInput, _float, _Identity
from morphgen.ir import Value
from morphgen.ir_ops import aggregate_scale

# Ops whose output row r depends on row r of their node inputs only (and on weights): run on a
# ghost row whose inputs hold the owner's values, they give the owner's value there too.
_ROW_LOCAL = {"linear", "typed_linear", "bias_add", "relu", "leaky_relu", "elu", "exp", "sigmoid", "tanh", "neg",
              "sqrt", "rsqrt", "log", "abs", "pow", "gelu", "softplus", "shift", "add", "sub", "mul", "div",
              "scale", "dropout", "softmax", "log_softmax", "concat", "dot", "slice",
              "head_mul", "head_mean", "layer_standardize"}


class MPIEmitter(OpenMPEmitter):
    backend = "mpi"
    timers = TIMERS + ("halo", "allreduce_wait", "allreduce_exposed")
    backend_headers = ("distributed.h",)
    distributed = True
    identity_nodes = "m.part.global_nodes"    # featureless rows are one-hots of global node ids
    row_gradients = True             # a table's gradient: the rows written on some rank (TableRows)

    def __init__(self, program, buffer_plan=None, op_timers: bool = False):
        super().__init__(program, buffer_plan, op_timers)
        self.full_rows: set = set()         # node values computed for ghost rows too (see rows())
        self.exchanged: set = set()         # forward values whose ghost rows an exchange has filled
        self.backward_ids: set = set()
        self.grad_started: list = []        # parameter indices whose all-reduce is in flight, in start order
        self.forward_ops: set = set()
        self.reducing = False               # lowering a sum over rows: owned rows only
        self.overlapped: set = set()        # ops whose call runs the halo exchange behind interior rows
        self.table_rows: dict = {}          # table-gradient id -> its TableRows member (reduced as rows)
        self.table_reads: dict = {}         # table id -> the forward lookups' (types, rows, count) reading it
        self.basis_tables: set = set()      # bases-gradient ids computed from reduced pair sums (BasisTable)

    # -- what the OpenMP lowering keeps and what it gives up here -------------------------------
    def lower_program(self) -> tuple:
        self.backward_ids = {op.output.id for op in self.p.backward if op.output is not None}
        self.forward_ops = {id(op) for op in self.p.forward}
        self.full_rows = self.ghost_complete_values()
        # a dropout of the input features, dense or inside the sparse kernels, keys its mask by global row
        self.prepare.append("m.features.drop_row_ids = m.part.node_gid.data()")
        return super().lower_program()

    # -- rows: a node value is stored for owned and ghost rows, computed for owned rows only -------
    def rows(self, v: Value) -> str:
        """Kernels compute owned rows; ghost rows are filled by exchanges.  Values whose ghost rows
        each rank computes itself (instead of receiving them) are computed for every row."""
        if v.assoc == "node" and (self.reducing or v.id not in self.full_rows):
            return "m.part.num_owned"
        return super().rows(v)

    def storage_numel(self, v: Value) -> str:
        if v.assoc == "node":
            return f"(m.graph.num_nodes) * ({self.width(v)})"
        return super().storage_numel(v)

    def all_rows(self, v: Value) -> str:
        return "m.part.global_nodes" if v.assoc == "node" else super().all_rows(v)

    def across_ranks(self) -> str:
        return "mg::mpi::AcrossRanks{m.part}"

    # -- values computed once at load time ------------------------------------------------------
    def invariant_computed(self, v: Value) -> list:
        """An invariant value is right on owned rows (ghosts have no in-edges here, so a sum
        over in-edges is not right there).  When an op reads it at edge sources (SGC's S^K x; a
        node scale, which aggregations read at both ends), one exchange at load time gives its
        ghost rows their owners' values, as the loaded features have."""
        if v.assoc != "node" or not any(v in self.source_reads(op) for op in self.p.all_ops()):
            return []
        k = self.timers.index("halo")
        return [f"mg::mpi::halo_forward(m.part, const_cast<float *>({self.views[v.id]}), {self.width(v)}, "
                f"m.timers[{k}])"]

    # -- halo exchanges around the ops that cross the partition -----------------------------------
    def around(self, op, lines: list) -> list:
        before, after = self._exchange_source_rows(op), []
        if self._is_max_to_sources(op):
            after.append(self._reverse_max(op))
        elif self._writes_sources(op):
            before += self._ghost_rows_read_by_transpose(op)
            after.append(self._halo("halo_reverse", op.output))
        if op.output is not None and op.output.id in self.backward_ids:
            after += self._start_gradient_reductions(op.output.id)
        for vid, writer in self.extra_writes:      # gradients a fused kernel writes (batch norm's affine)
            if writer is op and vid in self.backward_ids:
                after += self._start_gradient_reductions(vid)
        return before + lines + after

    def _exchange_source_rows(self, op) -> list:
        """The forward halo exchanges of the node values ``op`` reads at edge sources, where they
        need one (an overlapped aggregation's own call exchanges its rows: op_aggregate)."""
        exchanges = []
        rows = self.source_read(op)
        for read in self.source_reads(op):
            if not self._needs_exchange(read):
                continue
            if not (read is rows and id(op) in self.overlapped):
                exchanges.append(self._halo("halo_forward", read))
            if read.id not in self.backward_ids:   # a gradient's ghost rows may be zeroed later
                self.exchanged.add(read.id)
        return exchanges

    def around_absorbed(self, op) -> list:
        """A gather of source rows that a fused kernel reads in place (weighted scatters, edge dots,
        the attention scores) still exchanges its halo where it stood, before that kernel runs."""
        if op.opcode != "gather" or op.attrs["end"] != "src":
            return []
        return self._exchange_source_rows(op)

    def edge_ids(self) -> str:
        return "m.part.edge_gid.data()"

    def ghost_complete_values(self) -> set:
        """Forward values whose ghost rows hold their owners' rows when computed, so that no
        exchange is needed: the input features (loaded for ghosts), node constants of the global
        graph, and what row-local ops compute from complete values (dropout masks are keyed by
        global ids, so they agree too).  A value exchanged for an aggregation is complete from
        that point on, so row-local values computed from it afterwards are complete as well."""
        complete_now = {self.features_id} if self.features_id is not None else set()
        at_definition = set(complete_now)
        for op in self.p.forward:
            for read in self.source_reads(op):
                complete_now.add(read.id)           # exchanged here unless complete already
            out = op.output
            if out is None or out.assoc != "node":
                continue
            if op.opcode == "graph_scalar" or (op.opcode in _ROW_LOCAL and all(
                    v.assoc in ("param", "scalar") or v.id in complete_now for v in op.inputs)):
                complete_now.add(out.id)
                at_definition.add(out.id)
        return at_definition

    @staticmethod
    def source_read(op):
        """The node value this op reads at edge sources (ghost rows included), or None."""
        if op.opcode == "aggregate" and op.attrs.get("direction", "in") == "in":
            return op.inputs[0]
        if op.opcode in ("gather", "edge_typed_linear", "edge_typed_linear_weight_grad") and op.attrs["end"] == "src":
            return op.inputs[0]
        if op.opcode == "scatter_max_grad" and op.attrs.get("end", "dst") == "src":
            return op.inputs[0]       # each out-edge's source row: the gradient of the max there
        return None

    @classmethod
    def source_reads(cls, op) -> list:
        """The node values this op reads at edge sources: its rows (source_read) and an
        aggregation's node scale (norm=node_scale), which it reads at both ends of every edge."""
        rows = cls.source_read(op)
        reads = [rows] if rows is not None and rows.assoc == "node" else []
        scale = aggregate_scale(op) if op.opcode == "aggregate" else None
        return reads + ([scale] if scale is not None else [])

    def op_aggregate(self, op, x, *weights):
        """An aggregation over in-edges whose input needs an exchange first aggregates the rows
        that read no ghost while the halo travels, then the others (distributed.h,
        aggregate_with_halo).  The call times itself: the exchange into `halo`, the rest into
        `aggregate`."""
        if (op.attrs.get("direction", "in") != "in" or self._identity_rows(x) is not None
                or not self._needs_exchange(x)):
            return super().op_aggregate(op, x, *weights)
        self.overlapped.add(id(op))
        bytes_, flops = self._agg_cost(x)
        self.note_kernel("mg::mpi::aggregate_with_halo")
        return (f"mg::mpi::aggregate_with_halo(m.part, m.timers[{self.timers.index('aggregate')}], double({bytes_}), "
                f"double({flops}), m.timers[{self.timers.index('halo')}], {self.aggregate_args(op, x)})")

    def _writes_sources(self, op) -> bool:
        """Whether this op leaves partial sums in source rows (owned by other ranks when ghosts)."""
        out_aggregate = op.opcode == "aggregate" and op.attrs.get("direction", "in") == "out"
        if out_aggregate and op.attrs.get("reduce") == "max":    # the language writes it as a scatter
            raise self._unsupported(op, "a max aggregation over out-neighbours")
        to_sources = (op.opcode in ("scatter", "edge_typed_linear_input_grad")
                      and op.attrs.get("end", "dst") == "src")
        return out_aggregate or to_sources or op.opcode == "aggregate_max_grad"

    @staticmethod
    def _is_max_to_sources(op) -> bool:
        """`Max(e in v.outgoing_edges(): ...)`: a max over the out-edges, which ranks share."""
        return op.opcode == "scatter" and op.attrs.get("end", "dst") == "src" and op.attrs.get("reduce") == "max"

    def _reverse_max(self, op) -> str:
        """Each rank has the max over the out-edges it holds; the owners take the max of the
        shares and tell every rank which edge won (distributed.h, halo_reverse_max)."""
        out, k = op.output, self.timers.index("halo")
        return self.timed("halo", f"mg::mpi::halo_reverse_max(m.part, m.graph, {self.ptr(out)}, "
                                  f"{self.argmax_for(out)}, {self.width(out)}, m.timers[{k}])")

    def _ghost_rows_read_by_transpose(self, op) -> list:
        """A transposed aggregation also reads its input at ghost rows: the self-loop term of a
        ghost source, the argmax of a ghost row's max (its own row).  Those terms belong to the
        owner, which adds its own: they must read zero here.  A gradient is computed for owned
        rows only, so its ghost rows are set to zero first."""
        if op.opcode not in ("aggregate", "aggregate_max_grad"):
            return []
        g = op.inputs[0]
        if g.assoc != "node":
            return []
        if g.id in self.backward_ids:
            return [f"mg::mpi::zero_ghost_rows(m.part, {self.ptr(g)}, {self.width(g)})"]
        if op.attrs.get("self_loops"):
            raise self._unsupported(op, "an aggregation over out-neighbours with self loops in the forward pass")
        return []

    def _needs_exchange(self, v: Value) -> bool:
        if v.assoc != "node" or v.id in self.full_rows or v.id in self.exchanged:
            return False
        # input features are loaded for ghost rows; invariants read at sources are exchanged at load time
        return v.id != self.features_id and v.id not in self.feature_like and v.id not in self.views

    def _halo(self, fn: str, v: Value) -> str:
        """An exchange, timed; its timer counts the bytes actually sent."""
        k = self.timers.index("halo")
        return self.timed("halo", f"mg::mpi::{fn}(m.part, {self.ptr(v)}, {self.width(v)}, m.timers[{k}])")

    def _unsupported(self, op, what: str) -> UnsupportedInput:
        return UnsupportedInput(op, f"the mpi backend does not support {what} ('{op.opcode}') yet; use "
                                    f"--backend openmp")

    # -- the pipelined weight-gradient all-reduce ------------------------------------------------
    def _start_gradient_reductions(self, value_id: int) -> list:
        """The all-reduce of the weight gradient ``value_id`` starts as soon as it is computed."""
        lines = []
        for i, prm in enumerate(self.p.params):
            g = self.p.grads.get(prm.name)
            if g is not None and g.id == value_id and i not in self.grad_started:
                self.grad_started.append(i)
                lines.append(self._start_reduction(i, prm, g))
        if not lines and self.grad_started:
            lines.append("m.grads.progress()")     # MPI moves reductions along only inside its calls
        return lines

    def _start_reduction(self, i: int, prm, g: Value) -> str:
        if g.id in self.basis_tables:             # the bases' pair sums (dV made after the wait)
            return f"m.grads.start_bases(m.part, {i}, m.{self.table_rows[g.id]})"
        if g.id in self.table_rows:               # only the rows some rank's lookups wrote
            return f"m.grads.start_rows(m.part, {i}, {self.ptr(g)}, m.{self.table_rows[g.id]})"
        return f"m.grads.start(m.part, {i}, {self.ptr(g)}, {self.numel(prm.value)})"

    def keeps_rows_only(self, grad: Value) -> bool:
        """A table whose gradient keeps its looked-up rows is shared out between the ranks
        (_embedding_grad), which needs its one lookup to be its only reader: a rank steps the
        rows it reads, and another op could read others.  Otherwise whole gradients and steps."""
        table = self.param_of_gradient(grad)
        return (super().keeps_rows_only(grad) and len(self._readers_of(table)) == 1
                and len(self.table_reads.get(table.id, [])) == 1)

    def _readers_of(self, v: Value) -> list:
        return [op for op in self.p.all_ops() if any(u.id == v.id for u in op.inputs)]

    def _embedding_grad(self, plan: str, g: Value, table_rows: str, M: str, out: Value) -> str:
        """A table shared out between the ranks (distributed.h, TableRows): the all-reduce sums
        the rows that some rank's lookups write (on aifb's R-GCN about a twelfth of the
        per-relation tables), and each rank steps the rows it reads or writes and its range of
        the rows nobody reads, and stores those rows only: weights, moments and gradient."""
        if not self.keeps_rows_only(out):
            return super()._embedding_grad(plan, g, table_rows, M, out)
        name = self._table_rows_name(out)
        types, idx, count = self.table_reads[self.param_of_gradient(out).id][0]
        self._table_member("TableRows", name, out, table_rows, M,
                           f"m.{name}.build(m.part, {plan}.keys.data(), {plan}.unique, {types}, {idx}, {count}, "
                           f"{self.identity_nodes}, {M}, {table_rows})")
        return self.timed("typed_linear", f"m.{name}.grad_rows({plan}, {self.ptr(g)}, {M}, {self.ptr(out)})",
                          f"8.0 * {self.numel(g)}", kernel="mg::mpi::TableRows::grad_rows")

    def _table_member(self, kind: str, name: str, grad: Value, table_rows: str, M: str, build: str) -> None:
        """A table shared out between the ranks (TableRows or BasisTable ``name``, holding the
        weight whose gradient is ``grad``): built at load time, then allocating the weight, its
        moments and its gradient in the rows this rank stores, which the ABI's weights and
        checkpoints read and write through it (the template's packed tables)."""
        i = self.param_index[self.param_of_gradient(grad).id]
        self.table_rows[grad.id] = name
        self.members.append(f"mg::mpi::{kind} {name};")
        self.extra_bytes.append(f"m.{name}.bytes()")
        self.prepare.append(build)
        self.prepare.append(f"m.{name}.allocate(m.p{i}, m.m{i}, m.s{i}, 2, m.allocated_bytes)")   # Adam's two moments
        self.packed_tables[i] = f"m.{name}.share()"
        self.views[grad.id] = f"m.{name}.gradient.data"
        self.row_grads[grad.id] = (f"m.{name}", table_rows, M)

    def _gradient_of(self, weight: Value) -> Optional[Value]:
        i = self.param_index.get(weight.id)
        return None if i is None else self.p.grads.get(self.p.params[i].name)

    @staticmethod
    def _table_rows_name(grad: Value) -> str:
        return f"table_rows{grad.id}"

    def _shared_lookup(self, op, x: Value, w: Value):
        """The forward lookup of a table shared out between the ranks (the one op that reads it)
        reads this rank's stored rows through its TableRows (TableRows::lookup_index), or None
        for any other product."""
        if self._identity_rows(x) is None or id(op) not in self.forward_ops:
            return None
        grad = self._gradient_of(w)
        if grad is None or not self.keeps_rows_only(grad):
            return None
        out = op.output
        return self.timed("typed_linear", f"mg::op::embedding_rows({self.ptr(w)}, nullptr, "
                          f"m.{self._table_rows_name(grad)}.lookup_index(), {self.rows(out)}, 0, {self.width(out)}, "
                          f"{self.ptr(out)})", f"8.0 * {self.numel(out)}")

    def lower_optimizer(self) -> list:
        """Each weight's step waits for its own reduction only, and the steps run in the order the
        reductions started: the gradient completed last (the first layer's) has every other
        step to travel behind.  Steps are independent per weight, so the order changes nothing
        in the numbers."""
        pairs, exposed = [], self.timers.index("allreduce_exposed")
        for i, prm in enumerate(self.p.params):
            g = self.p.grads.get(prm.name)
            if g is None:
                continue
            start = "" if i in self.grad_started else f"{self._start_reduction(i, prm, g)}; "
            wait = self.timed("allreduce_wait", f"{start}m.grads.wait({i}, m.timers[{exposed}])")
            if g.id in self.basis_tables:         # dV's rows from the summed pairs, then the step
                n = self.numel(g)
                wait += " " + self.timed("typed_linear", f"m.{self.table_rows[g.id]}.bases_grad({self.ptr(g)})",
                                         f"4.0 * {n}", f"2.0 * {n}", kernel="mg::mpi::BasisTable::bases_grad")
            pairs.append((i, wait))
        steps = super().lower_optimizer()       # one step per parameter with a gradient, same order
        started = {i: k for k, i in enumerate(self.grad_started)}
        order = sorted(range(len(pairs)), key=lambda k: started.get(pairs[k][0], len(started)))
        return [line for k in order for line in (pairs[k][1], steps[k])]

    def op_typed_linear_bases_coef_grad(self, op, x, g, v):
        return self._owned_rows_only(super().op_typed_linear_bases_coef_grad, op, x, g, v, summed=g)

    def op_typed_linear_bases_grad(self, op, x, a, g):
        return self._owned_rows_only(self._bases_grad, op, x, a, g)

    def _basis_table(self, bases: Value) -> Optional[str]:
        """The BasisTable member that holds the bases ``bases`` (V[B][nodes][M]) of featureless
        basis lookups, or None: under Adam, where only the lookups and their coefficients'
        gradient read V, all at the same rows.  Decided from the IR alone, so that the forward
        lookups, lowered first, read V as the backward will store it."""
        grad = self._gradient_of(bases)
        readers = self._readers_of(bases)
        lookups = [r for r in readers if r.opcode == "typed_linear_bases"]
        if grad is None or not lookups or not (self.row_gradients and self.only_adam_reads(grad)):
            return None
        x, domain = lookups[0].inputs[0], lookups[0].inputs[1].domain
        if not all(r.opcode in ("typed_linear_bases", "typed_linear_bases_coef_grad") and r.inputs[0].id == x.id
                   and r.attrs.get("domain", domain) == domain for r in readers):
            return None
        return f"bases{grad.id}"

    def basis_storage(self, bases: Value, plan: str) -> tuple:
        """Packed bases (BasisTable) are read through the table's own plan and row count."""
        name = self._basis_table(bases)
        if name is None:
            return super().basis_storage(bases, plan)
        return f"m.{name}.lookup_plan()", f"m.{name}.rows_per_basis()"

    def _bases_grad(self, op, x, a, g):
        """The bases of featureless basis lookups, V[B][nodes][M] (_basis_table): the lookups'
        pair sums are reduced and each rank makes the rows of dV it steps from them
        (distributed.h, BasisTable), instead of reducing the whole of dV; V, its moments and dV
        are stored in the rows the rank steps."""
        out = op.output
        bases = self.param_of_gradient(out)
        name = self._basis_table(bases)
        if name is None:
            return super().op_typed_linear_bases_grad(op, x, a, g)
        plan, B, M = self.basis_plan(x, a.domain), self.dim(bases.shape[0]), self.width(out)
        self.basis_tables.add(out.id)
        self._table_member("BasisTable", name, out, f"{B} * {self.identity_nodes}", M,
                           f"m.{name}.build(m.part, {plan}, {B}, {self.identity_nodes}, {M})")
        self.lookup_sums_of[plan] = None          # the plan's scratch holds no sums of g now
        return self.timed("typed_linear", f"m.{name}.pack({self.ptr(g)}, {self.ptr(a)})", f"8.0 * {self.numel(g)}",
                          f"1.0 * {self.numel(g)}", kernel="mg::mpi::BasisTable::pack")

    def op_linear(self, op, x, w):
        self._note_table_read(op, x, w, "nullptr")
        return self._shared_lookup(op, x, w) or super().op_linear(op, x, w)

    def op_typed_linear(self, op, x, w):
        self._note_table_read(op, x, w, self.type_expr(w.domain))
        return self._shared_lookup(op, x, w) or super().op_typed_linear(op, x, w)

    def _note_table_read(self, op, x: Value, w: Value, types: str) -> None:
        """A featureless lookup of table ``w``: the rows it reads (a rank must step them all, ghost
        rows included where the lookup runs for them: TableRows)."""
        ident = self._identity_rows(x)
        if ident is not None and id(op) in self.forward_ops:
            self.table_reads.setdefault(w.id, []).append((types, ident.idx or self.node_ids(), self.rows(op.output)))

    # -- featureless input: one-hot rows of global node ids -------------------------------------
    def feature_identity(self) -> _Identity:
        return _Identity("m.part.node_gid.data()")

    def edge_end_identity(self, end: str) -> _Identity:
        line = "mg::mpi::build_edge_end_ids(m.part, m.graph)"
        if line not in self.prepare:
            self.prepare.append(line)
        return _Identity("m.part.src_gid.data()" if end == "src" else "m.part.dst_gid.data()")

    # -- ops whose meaning depends on the whole graph ------------------------------------------
    def require(self, what: str) -> None:
        if what == "weighted_gcn_scale":     # the ghosts' weighted degrees come from their owners
            line = "mg::mpi::build_weighted_gcn_scale(m.part, m.g)"
            if line not in self.graph_needs:
                self.graph_needs.append(line)
            return
        super().require(what)

    def op_graph_scalar(self, op):
        kind = op.attrs["kind"]
        if kind in ("in_degree", "out_degree"):
            self.prepare.append(f"mg::mpi::global_degree(m.part, {'true' if kind == 'in_degree' else 'false'}, "
                                f"{self.ptr(op.output)})")
            return None
        return super().op_graph_scalar(op)      # norms use the global degrees Graph was given

    def _row_ids(self, v: Value) -> str:
        return {"node": "m.part.node_gid.data()", "edge": "m.part.edge_gid.data()"}.get(v.assoc, "nullptr")

    def _dropout(self, op, x, training: str, site: str, backward: str):
        n = self.numel(x)
        return self.timed("dropout", f"mg::mpi::dropout_rows({training}, {self.ptr(x)}, {self.ptr(op.output)}, "
                          f"{self.rows(x)}, {self.width(x)}, {self._row_ids(x)}, {_float(op.attrs['p'])}f, "
                          f"mg::DropoutKey{{m.seed, uint64_t(m.epoch), {site}u}}, {backward})", f"8.0 * {n}")

    def op_dropout(self, op, x):
        if op.output.id in self.feature_like:      # stays in the features' format (m.features.drop_row_ids)
            return self._dropout_features(op, x)
        return self._dropout(op, x, "training", str(op.output.id), "false")

    def op_dropout_grad(self, op, g):
        return self._dropout(op, g, "true", str(int(op.attrs["site"])), "true")

    def dropout_act_grad_call(self, kind: str, alpha: str, drop, y: Value, out: Value) -> str:
        """The fused backward keys its mask by global row, as the dropout it stands for does."""
        g = drop.inputs[0]
        return (f"mg::op::dropout_act_grad_rows(mg::op::ActKind::{kind}, {alpha}f, {self.ptr(g)}, {self.ptr(y)}, "
                f"{self.rows(g)}, {self.width(g)}, {self._row_ids(g)}, {_float(drop.attrs['p'])}f, m.seed, "
                f"uint64_t(m.epoch), {int(drop.attrs['site'])}u, {self.ptr(out)})")

    def op_cross_entropy(self, op, logits, labels):
        return self.timed("loss", f"{self.ptr(op.output)}[0] = mg::mpi::cross_entropy({self.ptr(logits)}, m.labels, "
                          f"m.masks[0], m.graph.num_nodes, {self.width(logits)}, m.global_mask_count[0], nullptr)",
                          f"4.0 * {self.numel(logits)}")

    def op_cross_entropy_grad(self, op, logits, labels):
        return self.timed("loss", f"mg::mpi::cross_entropy({self.ptr(logits)}, m.labels, m.masks[0], "
                          f"m.graph.num_nodes, {self.width(logits)}, m.global_mask_count[0], {self.ptr(op.output)})",
                          f"8.0 * {self.numel(logits)}")

    def link_kernel(self, name: str) -> str:
        """Link prediction: the triples name nodes of the whole graph (distributed.h)."""
        return f"mg::mpi::{name}(m.part, "

    def _owned_rows_only(self, lower, op, *inputs, summed: Optional[Value] = None):
        """A sum over node rows (of ``summed``, else the last input) counts owned rows only: dense
        kernels are told so; the kernels that walk every local row (sparse features, type
        groups, the plans of featureless basis lookups, which cover ghost rows) read ghost rows
        set to zero."""
        g = inputs[-1] if summed is None else summed
        if id(op) in self.forward_ops and g.assoc == "node":
            raise self._unsupported(op, "a sum over all nodes in the forward pass")
        zero = []
        walks_all_rows = (op.opcode in ("typed_matmul_tn", "typed_row_sum", "typed_linear_bases_coef_grad",
                                        "typed_linear_bases_grad")
                          or (op.opcode == "matmul_tn" and inputs[0].id in self.feature_like))
        if g.assoc == "node" and walks_all_rows:
            zero = [f"mg::mpi::zero_ghost_rows(m.part, {self.ptr(g)}, {self.width(g)})"]
        self.reducing = True
        try:
            lines = lower(op, *inputs)
        finally:
            self.reducing = False
        return zero + (lines if isinstance(lines, list) else [lines])

    def op_row_sum(self, op, g):
        return self._owned_rows_only(super().op_row_sum, op, g)

    def op_matmul_tn(self, op, x, g):
        return self._owned_rows_only(super().op_matmul_tn, op, x, g)

    def op_typed_matmul_tn(self, op, x, g):
        return self._owned_rows_only(super().op_typed_matmul_tn, op, x, g)

    def op_typed_row_sum(self, op, g):
        return self._owned_rows_only(super().op_typed_row_sum, op, g)
