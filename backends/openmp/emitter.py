"""OpenMP backend lowering: IR program -> kernel calls -> C++ source (Jinja2).

The emitter decides *how* (GUIDE §2, "backend lowering"): which buffers exist, which kernel
implements each op, which values are views (weight row slices) or never materialised
(featureless one-hot rows), and which graph constants are computed once at load time.  The
template `templates/model.cpp.j2` renders the C ABI around the resulting call lists; every call
is to `mg::op::*` in `ops.h`.

Names in the generated code are derived from IR value ids and parameter indices only: no
identifier or string from the .mp program reaches the C++ source (parameter names appear
only as C string literals, escaped by `_c_string`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import jinja2

from morphgen import __version__
from morphgen.errors import InternalError, UserError
from morphgen.ir import Program, Value
from morphgen.ir_ops import aggregate_scale, aggregate_weights, blocks_of
from morphgen.passes.liveness import lifetimes
from morphgen.passes.train_rows import train_row_values

_TEMPLATES = Path(__file__).parent / "templates"

# Kernel families that get a timer each (reported by `--profile`).
TIMERS = ("aggregate", "aggregate_backward", "gemm", "input_features", "input_features_grad", "typed_linear",
          "edges", "elementwise", "dropout", "loss", "optimizer")

# Dense weight gradients X^T G with G this narrow or narrower take a kernel of their own width
# (kernels/tall_skinny.h: kNarrowTnMax, AVX-512 only; on AVX2 the instance runs the tiles).
NARROW_TN_MAX = 8
_REDUCE = {"sum": "mg::Reduce::Sum", "mean": "mg::Reduce::Mean", "max": "mg::Reduce::Max"}
_BINOP = {"add": "mg::BinOp::Add", "sub": "mg::BinOp::Sub", "mul": "mg::BinOp::Mul", "div": "mg::BinOp::Div"}
_ACT_KIND = {"relu": "Relu", "leaky_relu": "LeakyRelu", "elu": "Elu", "exp": "Exp", "sigmoid": "Sigmoid",
             "tanh": "Tanh"}
_ACT_FWD = {"relu": "mg::relu_fwd({x}, {y}, {n})", "exp": "mg::exp_fwd({x}, {y}, {n})",
            "sigmoid": "mg::sigmoid_fwd({x}, {y}, {n})", "tanh": "mg::tanh_fwd({x}, {y}, {n})",
            "neg": "mg::neg_fwd({x}, {y}, {n})",
            "leaky_relu": "mg::leaky_relu_fwd({x}, {y}, {n}, {alpha}f)",
            "elu": "mg::elu_fwd({x}, {y}, {n}, {alpha}f)"}
_ACT_DEFAULT_ALPHA = {"leaky_relu": 0.01, "elu": 1.0}
_MATH_FN = {"sqrt": "Sqrt", "rsqrt": "Rsqrt", "log": "Log", "abs": "Abs", "pow": "Pow", "gelu": "Gelu",
            "softplus": "Softplus", "shift": "Shift"}
# The G input of each gradient of a typed linear at edge ends.
_EDGE_TYPED_GRAD_G = {"edge_typed_linear_input_grad": 0, "edge_typed_linear_weight_grad": 1}
_EPILOGUE_ACT = {"relu": "mg::Act::Relu", "leaky_relu": "mg::Act::LeakyRelu", "elu": "mg::Act::Elu"}


def _c_string(text: str) -> str:
    """A C string literal body for arbitrary text (only printable ASCII kept verbatim)."""
    out = []
    for ch in text:
        if ch.isascii() and ch.isprintable() and ch not in '"\\?':
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode("utf-8"))
    return "".join(out)


def _float(x: float) -> str:
    if not math.isfinite(x):
        raise InternalError(f"non-finite constant {x} in the program")
    return repr(float(x))


class UnsupportedInput(UserError):
    """The program needs something the bound data or the backend cannot give (e.g. raw features of
    a featureless set): located at the op's program text when it has one."""

    def __init__(self, op, message: str):
        where = OpenMPEmitter.location(op)
        self.located = bool(where)
        super().__init__(f"{where or 'morphgen: '}error: {message}")


@dataclass
class _Identity:
    """A value whose row r is the one-hot vector of node idx[r] (featureless input)."""
    idx: Optional[str]           # C++ expression of the row->node index array, None = row r


class OpenMPEmitter:
    backend = "openmp"               # the name the library answers in mg_backend_name()
    timers = TIMERS                  # kernel families with a timer each
    backend_headers: tuple = ()      # headers the generated source includes after ops.h
    distributed = False              # the ABI template's distributed parts (partition, reductions)
    identity_nodes = "m.graph.num_nodes"   # rows of a featureless input's one-hot table (per type)
    ops_header = "ops.h"             # the op layer the generated source calls (mg::op::*)
    ops_units = ("ops.cpp", "ops_aggregate.cpp")   # its definitions, compiled once, linked into every library
    device_memory = False            # buffers live on an accelerator: the ABI uploads inputs at prepare
    source_name = "model.cpp"        # the generated translation unit
    fuses_edge_traversals = True     # weighted scatters and edge dots read gathered node rows in place
    edge_typed_feature_views = True  # typed linears of feature rows at edge ends read dense or CSR features
    row_gradients = True             # an embedding table's gradient keeps the looked-up rows only (Adam)
    fuses_batch_norm_grads = True    # batch norm's backward with its affine part's gradients: one kernel
    fuses_relu_into_batch_norm_grads = True   # ... and the backward of a relu after that affine part
    keeps_batch_statistics = True    # a fused batch norm's forward leaves its statistics to its backward
    fuses_batch_norm_affine = True   # batch norm with its affine part and activation: one forward kernel
    spmm_tile_by_width = True        # aggregations of rows wider than 32 use 64-float tiles (spmm_tile)
    narrow_tn_by_width = True        # narrow dense weight gradients take a kernel of their width (narrow_tn_width)
    fuses_edge_attention = True      # GAT's scores and edge softmax, and their backward: one walk each
    shares_basis_lookup_sums = False  # a basis lookup's two gradients of one G share its per-pair sums
    residual_epilogues = True        # a product or aggregation adds the other operand of its one add
    typed_bias_epilogues = True      # a dense or typed product adds a per-type bias row (typed_param)
    traverses_edge_rows = True       # edge traversals read stored edge rows in place and write scaled gathers
    reads_train_rows_only = True     # gradients zero outside the training rows are reduced over those alone

    def __init__(self, program: Program, buffer_plan: Optional[tuple] = None, op_timers: bool = False):
        """``buffer_plan``: (value id -> shared buffer name, the shared buffers) from a first
        lowering's share_buffers; emit() makes it, so callers pass only the program.
        ``op_timers``: a timer per IR op (timed()) besides the kernel families' timers."""
        self.p = program
        self.op_timers = op_timers
        self.timers = list(type(self).timers)   # the families, then the ops' timers when op_timers
        self.buffer_of, self.shared_buffers = buffer_plan or ({}, None)
        self.sizes: list = []
        self.buffers: list = []          # dicts: name, numel, comment (one per value needing storage)
        self.index_buffers: list = []
        self.members: list = []          # extra Model members (plans)
        self.prepare: list = []          # statements run once at load time
        self.graph_needs: list = []      # derived graph arrays to build first (ops.h Graph::build_*)
        self.extra_bytes: list = []      # C++ expressions of load-time structures' sizes (reported)
        self.views: dict = {}            # value id -> C++ pointer expression
        self.identity: dict = {}         # value id -> _Identity
        self.argmax: dict = {}           # value id of a max result -> index buffer name
        self.plans: dict = {}            # (type expr, idx expr, T, rows) -> plan member name
        self.row_grads: dict = {}        # weight-gradient id -> (plan, table rows, width): rows only
        # parameter index -> the TableShare that allocates and stores it (MPI: rows each rank steps)
        self.packed_tables: dict = {}
        self.producer: dict = {}
        self.param_index = {p.value.id: i for i, p in enumerate(program.params)}
        self.features_id = program.inputs["features"].id if "features" in program.inputs else None
        self.labels_id = program.inputs["labels"].id if "labels" in program.inputs else None
        self.has_buffer: set = set()
        self.feature_like: dict = {}     # value id -> C++ FeatureView expression (input features, dropped)
        self.epilogues: dict = {}        # id(aggregate op) -> (bias value, activation op, final value)
        self.epilogues_run: set = set()  # id() of the heads whose kernel call carries their epilogue
        self.current_op = None           # the op being lowered (for located errors)
        self.untimed = False             # lowering calls run once at load time (lower_invariant)
        self.readers: dict = {}          # value id -> [(op, input position)] over forward + backward
        self.absorbed: set = set()       # id() of ops run inside a fused epilogue
        self.fused_dropout_grad: dict = {}   # act_grad output id -> the dropout_grad it runs inside
        self.rows_summed: set = set()    # id() of edge typed gradient ops whose G row sums are already made
        self.lookup_sums_of: dict = {}   # basis lookup plan -> the G whose per-pair sums its scratch holds
        self.gathered_grads: dict = {}   # id(edge typed gradient op) -> the weighted gather its row sums read
        self.far_plans: set = set()      # keys of edge typed row layouts that keep each edge's destination
        self.stored_rows: dict = {}      # value id -> its edge typed linear, whose products it holds by row
        self.stored_plans: dict = {}     # layout key -> whether a traversal over sources reads its stored rows
        self.needs_dense_features = False   # an op reads the raw feature matrix (not through a linear layer)
        self.fused_into: dict = {}       # id() of an op run inside another op's kernel -> that op
        self.edge_scatters: dict = {}    # id(scatter) -> (x, end x is read at, edge weights, heads)
        self.edge_dots: dict = {}        # id(dot | feature_sum) -> (a, a's end, b, b's end, heads)
        self.weighted_gathers: dict = {}  # id(head_mul | mul | div) -> (x, end, w): gather(x) scaled, one pass
        self.edge_attention: dict = {}   # id(edge_softmax) -> (a read at sources, b at destinations, act)
        self.softmax_grads: dict = {}    # id(edge_softmax_grad) -> (dropout_grad, act_grad, dst scatter)
        self.head_products: dict = {}    # id(row_sum | add) -> the head_mul it runs (plan_head_products)
        self.scaled_operands: dict = {}  # id(add | sub) -> its operands' constant factors (plan_scaled_operands)
        self.extra_reads: list = []      # (value id, op): values a fused kernel reads at that op
        self.extra_writes: list = []     # (value id, op): values a fused kernel writes at that op
        self.batch_norm_grads: dict = {}  # id(batch_standardize_grad) -> (a, gamma, dgamma, dbeta, relu beta or None)
        self.batch_norm_affine: dict = {}  # id(batch_standardize) -> (the mul by gamma it runs, gamma)
        self.batch_statistics: dict = {}   # id(batch norm forward or backward) -> Model member of its statistics
        self.unwritten: set = set()      # ids of values every reader recomputes: never stored
        self.plan_rows: list = []        # per lowered op: what the backend chose (--emit plan)
        self.residuals: dict = {}        # id(op) -> the value its kernel adds before its epilogue
        self.bias_types: dict = {}       # id(op) -> C++ row-type array: its epilogue's bias is per type
        self.train_rows: frozenset = frozenset()   # ids of gradients zero outside the training rows
        self.logit_row_values: dict = {}  # value id -> whether only the logit rows of it are read (on_logit_rows)

    # -- shapes ------------------------------------------------------------------------------
    def dim(self, d) -> str:
        """A size as a C++ expression, always 64-bit: products of sizes must not wrap in int."""
        if isinstance(d, int):
            return f"int64_t({d})"
        text = str(d)

        def size_ref(match):
            name = match.group(0)
            if name not in self.sizes:
                self.sizes.append(name)
            return f"m.size[{self.sizes.index(name)}]"
        expr = re.sub(r"[A-Za-z_][A-Za-z0-9_]*", size_ref, text)
        if not re.fullmatch(r"[m.size\[\]0-9+\-*() ]+", expr):
            raise InternalError(f"cannot render dimension {d!r}")
        return f"({expr})"

    def rows(self, v: Value) -> str:
        if v.assoc == "node":
            return "m.graph.num_nodes"
        if v.assoc == "edge":
            return "m.graph.num_edges"
        if v.assoc == "scalar" or len(v.shape) <= 1:
            return "1"
        return "*".join(self.dim(d) for d in v.shape[:-1])

    def width(self, v: Value) -> str:
        return self.dim(v.shape[-1]) if v.shape else "1"

    def numel(self, v: Value) -> str:
        return f"({self.rows(v)}) * ({self.width(v)})"

    def storage_numel(self, v: Value) -> str:
        """Elements of the buffer that stores ``v`` (the rows kernels compute may be fewer)."""
        return self.numel(v)

    # -- storage -------------------------------------------------------------------------------
    @staticmethod
    def location(op) -> str:
        """``FILE:LINE:COL: `` of the program text an op came from, or '' when it has none."""
        return f"{op.loc.file}:{op.loc.line}:{op.loc.col}: " if op is not None and op.loc else ""

    def typed_groups(self, op, domain: str) -> str:
        """The rows of ``op``'s typed product grouped by type: the graph's groups, or for B
        diagonal blocks per type those of B times the rows, built once at load time."""
        blocks = blocks_of(op)
        if blocks == 1:
            return self.groups(domain)
        key = ("blocked_groups", domain, blocks)
        if key not in self.plans:
            name = f"plan{len(self.plans)}"
            self.plans[key] = name
            rows, types = ("num_edges", "num_etypes") if domain == "etype" else ("num_nodes", "num_ntypes")
            self.members.append(f"mg::op::TypeGroups {name};")
            self.extra_bytes.append(f"m.{name}.bytes()")
            self.prepare.append(f"mg::op::build_blocked_groups(m.{name}, {self.type_expr(domain)}, m.graph.{rows}, "
                                f"m.graph.{types}, {blocks})")
        return f"m.{self.plans[key]}"

    def _blocked_featureless(self, op) -> UnsupportedInput:
        return UnsupportedInput(op, "a block-diagonal weight cannot multiply featureless input (a learned row "
                                    "per node); give it a plain typed weight")

    def _featureless_read(self) -> UnsupportedInput:
        op = self.current_op
        return UnsupportedInput(
            op, f"this program reads the input features directly (in '{op.opcode if op else '?'}'), not only "
                f"through a weight; a featureless dataset (identity features) cannot provide that: train it "
                f"on a dataset with node features")

    def ptr(self, v: Value) -> str:
        if v.id in self.param_index:
            return f"m.p{self.param_index[v.id]}.data"
        if v.id in self.views:
            return self.views[v.id]
        if v.id in self.identity:
            raise self._featureless_read()
        if v.id == self.features_id:
            self.needs_dense_features = True
            return "m.features.dense"
        if v.id not in self.has_buffer:
            self.has_buffer.add(v.id)
            self.buffers.append({"name": f"v{v.id}", "id": v.id, "numel": self.storage_numel(v),
                                 "comment": f"{v.describe()} {_c_string(v.name)}"[:80]})
        return f"m.{self.buffer_name(v)}.data"

    def buffer_name(self, v: Value) -> str:
        """The Model member that stores ``v``: its shared buffer once the plan exists."""
        return self.buffer_of.get(v.id, f"v{v.id}")

    def argmax_for(self, v: Value) -> str:
        if v.id not in self.argmax:
            name = f"arg{v.id}"
            self.argmax[v.id] = name
            self.index_buffers.append({"name": name, "numel": self.storage_numel(v), "comment": f"argmax of %{v.id}"})
        return f"m.{self.argmax[v.id]}.ptr()"

    def require(self, what: str) -> None:
        """Ask for a derived graph array (built once at load time, before anything uses it)."""
        line = f"m.g.build_{what}()"
        if line not in self.graph_needs:
            self.graph_needs.append(line)

    def type_expr(self, domain: str) -> str:
        self.require(f"{domain}s")
        return "m.g.etype()" if domain == "etype" else "m.g.ntype()"

    def groups(self, domain: str) -> str:
        self.require(f"{domain}s")
        return "m.g.etypes" if domain == "etype" else "m.g.ntypes"

    def edge_dst(self) -> str:
        self.require("edge_dst")
        return "m.g.edge_dst.data()"

    def node_ids(self) -> str:
        self.require("node_ids")
        return "m.g.node_ids.data()"

    def plan(self, type_expr: str, idx: str, types: str, rows: Value) -> str:
        key = (type_expr, idx, types, rows.assoc)
        if key not in self.plans:
            name = f"plan{len(self.plans)}"
            self.plans[key] = name
            self.members.append(f"mg::op::EmbeddingPlan {name};")
            self.prepare.append(f"m.{name}.build({type_expr}, {idx}, {self.rows(rows)}, {types}, "
                                f"{self.identity_nodes})")
        return f"m.{self.plans[key]}"

    # -- emission ----------------------------------------------------------------------------------
    def timed(self, timer: str, call: str, bytes_: str = "0", flops: str = "0", kernel: str = "") -> str:
        """A call inside its kernel family's timer; ``kernel`` names it when the call is not
        one function call (the plan table and backends' checks read the name).  Calls run once
        at load time (``untimed``) have none: the timers measure epochs."""
        self.note_kernel(kernel or call.split("(", 1)[0])
        if self.untimed:
            return call
        op = self.current_op
        if self.op_timers and op is not None:
            timer = f"{timer}: %{op.output.id if op.output is not None else '-'} {op.opcode}"
            if timer not in self.timers:
                self.timers.append(timer)
        return (f"{{ mg::ScopedTimer _t(m.timers[{self.timers.index(timer)}], double({bytes_}), double({flops})); "
                f"{call}; }}")

    def note_kernel(self, name: str) -> None:
        """Records that the op being lowered runs kernel ``name`` (the plan table)."""
        if self.plan_rows and self.plan_rows[-1]["op"] is self.current_op:
            self.plan_rows[-1]["kernels"].append(name)

    def lower(self, ops: list) -> list:
        out = []
        for op in ops:
            self.plan_rows.append({"op": op, "kernels": [], "fused_into": self.fused_into.get(id(op))})
            if id(op) in self.absorbed:
                out.extend(self.around_absorbed(op))
                continue
            self.current_op = op
            method = getattr(self, "op_" + op.opcode, None)
            if method is None:
                raise InternalError(f"the OpenMP backend has no lowering for IR opcode '{op.opcode}'")
            lines = method(op, *op.inputs)
            lines = lines if isinstance(lines, list) else [lines] if lines else []
            out.extend(self.around(op, lines))
        return out

    def around(self, op, lines: list) -> list:
        """The calls of one op with what the backend runs before and after them (none here)."""
        return lines

    def around_absorbed(self, op) -> list:
        """What the backend runs where an op that another op's kernel runs stood (none here)."""
        return []

    def edge_ids(self) -> str:
        """The ids that key an edge value's dropout mask by row (nullptr: its position)."""
        return "nullptr"

    def emit(self) -> dict:
        """Lower twice: the first lowering finds which values need storage of their own and
        where the fused kernels read and write; share_buffers turns that into a plan; the second
        lowering writes every call with its final buffer, so no generated text is rewritten."""
        probe = type(self)(self.p)
        probe.lower_program()
        self.__init__(self.p, buffer_plan=probe.share_buffers(), op_timers=self.op_timers)
        return self.render(*self.lower_program())

    def lower_program(self) -> tuple:
        """Plan the fusions, then lower invariant, forward, backward and optimizer into calls."""
        p = self.p
        for op in p.invariant + p.forward + p.backward:
            if op.output is not None:
                self.producer[op.output.id] = op
            for k, v in enumerate(op.inputs):
                self.readers.setdefault(v.id, []).append((op, k))
        if self.p.featureless and self.features_id is not None:
            self.identity[self.features_id] = self.feature_identity()
        elif self.features_id is not None:
            self.feature_like[self.features_id] = "m.features"
        if self.reads_train_rows_only and p.task != "link":
            self.train_rows = train_row_values(p)
        self.plan_feature_views()
        self.plan_epilogues()
        self.plan_dropout_act_grads()
        self.plan_edge_traversals()
        self.plan_gathered_row_sums()
        self.plan_stored_rows()
        self.plan_edge_attention()
        self.plan_edge_softmax_grads()
        self.plan_head_products()
        self.plan_edge_typed_row_sums()
        self.plan_batch_norm_grads()
        self.plan_batch_norm_affine()
        self.plan_kept_batch_statistics()
        self.plan_typed_biases()
        self.plan_residual_adds()
        self.plan_scaled_operands()
        self.lower_invariant()
        forward = self.lower(p.forward)
        backward = self.lower(p.backward)
        unrun = [op for op in p.forward + p.backward if id(op) in self.epilogues and id(op) not in self.epilogues_run]
        if unrun:       # a fused tail that its head's kernel never ran would silently vanish
            raise InternalError(f"the OpenMP backend planned a bias/activation epilogue for "
                                f"'{unrun[0].opcode}' (%{unrun[0].output.id}) that its kernel does not run")
        self.current_op = None           # the optimizer's calls belong to no IR op
        optimizer = self.lower_optimizer()
        for v in (p.loss, p.logits):     # read by the ABI: they need storage of their own
            if self.ptr(v) != f"m.{self.buffer_name(v)}.data":
                raise InternalError(f"the OpenMP backend stores {v!r} ({v.name}) as a view; the ABI reads it "
                                    f"as a buffer")
        self.prepare = self.graph_needs + self.prepare
        return forward, backward, optimizer

    def render(self, forward: list, backward: list, optimizer: list) -> dict:
        p = self.p
        loss_buffer, logits_buffer = self.buffer_name(p.loss), self.buffer_name(p.logits)
        params = []
        moments = {"adam": 2, "adamw": 2, "sgd": 1 if p.optimizer.momentum else 0}[p.optimizer.kind]
        for i, prm in enumerate(p.params):
            params.append({"name": _c_string(prm.name), "buf": f"p{i}", "index": i,
                           "m": f"m{i}", "v": f"s{i}", "numel": self.numel(prm.value),
                           "rank": len(prm.value.shape), "moments": moments,
                           "table": self.packed_tables.get(i, "")})
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_TEMPLATES)), undefined=jinja2.StrictUndefined,
                                 keep_trailing_newline=True)
        text = env.get_template("model.cpp.j2").render(
            version=__version__, source_name=_c_string(p.name), program_name=_c_string(p.name),
            backend=self.backend, backend_headers=self.backend_headers, distributed=self.distributed,
            ops_header=self.ops_header, device_memory=self.device_memory,
            sizes=self.sizes, params=params, timers=self.timers, buffers=self.shared_buffers,
            index_buffers=self.index_buffers, members=self.members, prepare=self.prepare,
            forward=forward, backward=backward, optimizer=optimizer, loss_buffer=loss_buffer,
            logits_buffer=logits_buffer, num_classes=self.width(p.logits), link_task=p.task == "link",
            link_relations=self._link_relations(),
            needs_dense_features=self.needs_dense_features, extra_bytes=self.extra_bytes,
            masked_logits="const mg::op::MaskedRows *logit_rows = nullptr;" in self.members,
            fingerprint=int((p.fingerprint or p.source_fingerprint())[:16], 16))
        return {self.source_name: text}

    def _link_relations(self) -> str:
        """Rows of the relation weight a link-prediction loss scores with ('0' for other tasks)."""
        if self.p.task != "link":
            return "0"
        loss_op = self.p.producer(self.p.forward)[self.p.loss.id]
        return self.dim(loss_op.inputs[1].shape[0])

    def plan_table(self) -> str:
        """What this backend chose for each IR op, as a table (``morphgen compile --emit plan``):
        the kernels it calls, the op whose kernel runs it when fused, and where its result lives."""
        if not self.plan_rows:
            self.emit()
        section_of = {id(op): name for name, ops in (("invariant", self.p.invariant), ("forward", self.p.forward),
                                                     ("backward", self.p.backward)) for op in ops}
        lines = [f"{'section':<9} {'op':<34} {'kernel':<40} {'fused into':<12} storage"]
        for row in self.plan_rows:
            op = row["op"]
            out = op.output
            what = f"{out!r} = {op.opcode}" if out is not None else op.opcode
            head = row["fused_into"]
            fused = f"{head.output!r} {head.opcode}" if head is not None else "-"
            kernel = ", ".join(row["kernels"]) or ("(in its kernel)" if head is not None else "-")
            if blocks_of(op) != 1:
                kernel += f" x{blocks_of(op)} blocks"
            if id(op) in self.epilogues:        # the kernel writes the fused chain's last value
                storage = f"written as {self.epilogues[id(op)][2]!r}"
            else:
                storage = self.storage_of(out) if out is not None else "-"
            lines.append(f"{section_of.get(id(op), '?'):<9} {what:<34} {kernel:<40} {fused:<12} {storage}")
        o = self.p.optimizer
        lines.append(f"optimizer {o.kind} step on {len(self.p.params)} parameters, one vectorised kernel call each")
        return "\n".join(lines)

    def unstored_values(self) -> set:
        """Ids of the values no buffer holds: computed inside another op's kernel and never
        written (fused tails up to their last value, in-place gathers, fused dropout backwards).
        The memory estimate leaves them out."""
        finals = {final.id for (_, _, final) in self.epilogues.values()}
        ops = self.p.forward + self.p.backward
        ids = {op.output.id for op in ops if id(op) in self.absorbed and op.output is not None}
        ids |= {op.output.id for op in ops if id(op) in self.epilogues}
        return (ids - finals - {vid for vid, _ in self.extra_writes}) | self.unwritten

    def storage_of(self, v: Value) -> str:
        """Where a value lives: a parameter, a shared epoch buffer, a view of another buffer."""
        if v.id in self.param_index:
            return f"parameter {self.p.params[self.param_index[v.id]].name}"
        if v.id in self.identity:
            return "identity rows (featureless: never stored)"
        if v.id in self.feature_like:
            return "input features (dense or sparse blocks, as bound)"
        if self.views.get(v.id, "").startswith("m.inv"):
            return f"computed once at load time ({self.views[v.id].split('.')[1].removesuffix('_data')})"
        if v.id in self.views:
            return f"view {self.views[v.id]}"
        if v.id in self.has_buffer:
            return f"buffer {self.buffer_name(v)} {v.assoc}[{','.join(map(str, v.shape))}]"
        return "-"

    def lower_invariant(self) -> None:
        """Values of the inputs and the graph alone (passes/hoist_invariant.py): computed once,
        in prepare, each into a buffer of its own."""
        for op in self.p.invariant:
            self.current_op = op
            self.plan_rows.append({"op": op, "kernels": [], "fused_into": None})
            unready = [v for v in op.inputs if v.id != self.features_id and not self._computed_once(v)]
            if unready:
                raise InternalError(f"the OpenMP backend cannot compute '{op.opcode}' once at load time: it reads "
                                    f"{unready[0]!r}, which is not computed before it")
            if op.opcode == "aggregate" and op.attrs.get("direction", "in") == "in":
                self._aggregate_once(op)
            else:       # a sum over out-edges too: the op's own lowering, the transposed walk
                self._compute_once(op)
            self.prepare += self.invariant_computed(op.output)

    def _computed_once(self, v: Value) -> bool:
        return self.views.get(v.id, "").startswith("m.inv")

    def _own_invariant_buffer(self, v: Value) -> str:
        name = f"inv{v.id}"
        self.members.append(f"mg::Buffer {name};")
        self.prepare.append(f"m.{name}.allocate({self.storage_numel(v)}, m.allocated_bytes)")
        self.views[v.id] = f"m.{name}.data"
        return f"m.{name}.data"

    def _compute_once(self, op) -> None:
        """An op of graph constants (degrees and what the program computes from them): the op's
        own lowering, without timers, run once in prepare into a buffer of its own."""
        self._own_invariant_buffer(op.output)
        method = getattr(self, "op_" + op.opcode, None)
        if method is None:
            raise InternalError(f"the OpenMP backend has no lowering for IR opcode '{op.opcode}'")
        self.untimed = True
        try:
            lines = method(op, *op.inputs)
        finally:
            self.untimed = False
        self.prepare += self.around(op, lines if isinstance(lines, list) else [lines] if lines else [])

    def _aggregate_once(self, op) -> None:
        """A hoisted aggregation: of the input features (in place of them when they have no
        other reader) or of an invariant value (S^K x); no argmax for a max (no gradient)."""
        x = op.inputs[0]
        self.note_kernel("mg::op::aggregate" if x.id != self.features_id else "mg::op::aggregate_features_once")
        if x.id != self.features_id:
            out = self._own_invariant_buffer(op.output)
            self.prepare.append(f"mg::op::aggregate(m.g, {self._agg_spec(op)}, {self.views[x.id]}, "
                                f"{self.width(x)}, {out}, nullptr)")
            return
        self.needs_dense_features = True
        # Overwriting the donated features is safe only when this is their one reader.
        sole_reader = len(self.readers.get(x.id, [])) == 1
        name = f"inv{op.output.id}"
        self.members += [f"mg::Buffer {name};", f"const float *{name}_data = nullptr;"]
        self.prepare.append(f"m.{name}_data = mg::op::aggregate_features_once(m.g, {self._agg_spec(op)}, "
                            f"m.features, {'m.features_donated' if sole_reader else 'false'}, m.{name}, "
                            f"m.allocated_bytes)")
        self.views[op.output.id] = f"m.{name}_data"

    def invariant_computed(self, v: Value) -> list:
        """Prepare-time lines that must follow the computation of invariant ``v`` (none here)."""
        return []

    def plan_feature_views(self) -> None:
        """Decide which dropouts of the input features stay in the features' own format.

        Dropped input features stay sparse or dense as loaded (the mask applied inside the
        feature kernels) only when every reader multiplies them by a weight; any other reader
        needs a plain buffer.  Decided before the fusion plan, which must know which products
        run on the feature kernels (those take no epilogue).
        """
        for op in self.p.forward:
            if op.opcode == "dropout" and op.inputs[0].id in self.feature_like and all(
                    k == 0 and reader.opcode in ("linear", "matmul_tn")
                    for reader, k in self.readers.get(op.output.id, [])):
                self.feature_like[op.output.id] = f"m.fv{op.output.id}"

    def plan_epilogues(self) -> None:
        """Run bias + activation inside the aggregation or dense-product kernel, before its write.

        Taken from the fusion pass's aggregate_epilogue and linear_epilogue groups when the
        backward reads none of the intermediates (it reads the activation's output, which the
        kernel writes).
        """
        for group in self.p.fusion:
            head = group.ops[0]
            if group.keep:
                continue
            if not (self._fusable_aggregate(group) or self._fusable_linear(group) or self._fusable_binary(group)):
                self._plan_bias_activation(group)
                continue
            bias = next((op.inputs[1] for op in group.ops[1:] if op.opcode == "bias_add"), None)
            act = next((op for op in group.ops[1:] if op.opcode in _EPILOGUE_ACT), None)
            if len(group.ops) != 1 + (bias is not None) + (act is not None):
                continue
            self.epilogues[id(head)] = (bias, act, group.ops[-1].output)
            self.absorbed.update(id(op) for op in group.ops[1:])
            self.fused_into.update((id(op), head) for op in group.ops[1:])

    def _plan_bias_activation(self, group) -> None:
        """A head whose kernel takes no epilogue (GAT's in-place weighted scatter, an aggregation
        by max): its bias_add still runs the activation in its own pass, one pass instead of two."""
        tail = group.ops[1:]
        if (group.kind == "edge_chain" or len(tail) != 2 or tail[0].opcode != "bias_add"
                or tail[1].opcode not in _EPILOGUE_ACT or self._identity_rows(tail[0].inputs[0]) is not None):
            return
        bias_add, act = tail
        self.epilogues[id(bias_add)] = (None, act, act.output)
        self.absorbed.add(id(act))
        self.fused_into[id(act)] = bias_add

    def plan_dropout_act_grads(self) -> None:
        """Run a dropout_grad inside the act_grad that is its one reader (one pass, no array)."""
        for op in self.p.backward:
            if op.opcode != "dropout_grad":
                continue
            readers = self.readers.get(op.output.id, [])
            if len(readers) == 1 and readers[0][0].opcode == "act_grad" and readers[0][1] == 0:
                self.fused_dropout_grad[readers[0][0].output.id] = op
                self.absorbed.add(id(op))
                self.fused_into[id(op)] = readers[0][0]

    def plan_batch_norm_grads(self) -> None:
        """Run batch norm's backward and its affine part's gradients as one kernel.

        Autodiff turns ``standardize(x) * gamma + beta`` into, from a = dL/d(out):
        ``dbeta = row_sum(a)``, ``g = a * gamma``, ``dgamma = row_sum(a * y)`` and
        ``dx = batch_standardize_grad(g, x, y)`` -- five passes over node rows that read ``a``
        four times and write ``g`` and ``a * y``.  ``batch_norm_affine_bwd`` (kernels/norm.h) sums
        a and a * y in one pass and writes dx in a second.  The products must have no other
        reader, and the two gradients no reader before the fused kernel runs.
        """
        if not self.fuses_batch_norm_grads:
            return
        order = {id(op): i for i, op in enumerate(self.p.backward)}

        def only_reader(v, op):
            return [r for r, _ in self.readers.get(v.id, [])] == [op]

        def read_after(v, step):
            return all(order.get(id(r), len(order)) > step for r, _ in self.readers.get(v.id, []))

        for bn in self.p.backward:
            if bn.opcode != "batch_standardize_grad":
                continue
            g, _, y = bn.inputs
            scale = self.producer.get(g.id)
            if scale is None or scale.opcode != "mul" or id(scale) in self.absorbed or not only_reader(g, bn):
                continue
            params = [v for v in scale.inputs if v.assoc == "param"]
            if len(params) != 1 or len(params[0].shape) != 1:
                continue
            gamma = params[0]
            a = next(v for v in scale.inputs if v is not gamma)
            if a.shape != g.shape or self._identity_rows(a) is not None:
                continue
            step = order[id(bn)]
            absorbed, dgamma, dbeta = [scale], None, None
            for reader, _ in self.readers.get(a.id, []):
                if id(reader) in self.absorbed or order.get(id(reader), step) >= step:
                    continue
                if reader.opcode == "row_sum" and dbeta is None and read_after(reader.output, step):
                    dbeta = reader.output
                    absorbed.append(reader)
                elif reader.opcode == "mul" and y in reader.inputs and a in reader.inputs and dgamma is None:
                    total = self.readers.get(reader.output.id, [])
                    if len(total) == 1 and total[0][0].opcode == "row_sum" and read_after(total[0][0].output, step):
                        dgamma = total[0][0].output
                        absorbed += [reader, total[0][0]]
            relu = self._relu_before_batch_norm_grad(a, y, gamma, absorbed)
            beta = None
            if relu is not None:
                act, beta = relu
                absorbed.append(act)
                a = act.inputs[0]           # the relu's output gradient: the kernel masks it itself
            self.batch_norm_grads[id(bn)] = (a, gamma, dgamma, dbeta, beta)
            for op in absorbed:
                self.absorbed.add(id(op))
                self.fused_into[id(op)] = bn
            self.extra_reads.append((a.id, bn))
            self.extra_writes += [(v.id, bn) for v in (dgamma, dbeta) if v is not None]

    def _relu_before_batch_norm_grad(self, a, y, gamma, group):
        """(act_grad, beta) when ``a`` is the relu's backward of ``relu(y * gamma + beta)``, the
        forward of this batch norm's affine part, and only the ops of its fused backward (``group``)
        read ``a``: batch_norm_affine_bwd then masks the relu's output gradient itself, and the
        act_grad's pass over two arrays and its writing of a third are saved.  None otherwise."""
        if not self.fuses_relu_into_batch_norm_grads:
            return None
        act = self.producer.get(a.id)
        if (act is None or act.opcode != "act_grad" or act.attrs.get("act") != "relu" or id(act) in self.absorbed
                or act.output.id in self.fused_dropout_grad):
            return None
        if {id(r) for r, _ in self.readers.get(a.id, [])} - {id(op) for op in group}:
            return None
        relu = self.producer.get(act.inputs[1].id)
        add = self.producer.get(relu.inputs[0].id) if relu is not None and relu.opcode == "relu" else None
        if add is None or add.opcode != "bias_add":
            return None
        scaled, beta = add.inputs
        scale = self.producer.get(scaled.id)
        if (beta.assoc != "param" or len(beta.shape) != 1 or scale is None or scale.opcode != "mul"
                or sorted(map(id, scale.inputs)) != sorted((id(y), id(gamma)))):
            return None
        return act, beta

    def plan_batch_norm_affine(self) -> None:
        """Run batch norm's forward with the product by gamma that follows it (and that product's
        fused bias and activation) as one kernel, ``batch_norm_affine_fwd`` (kernels/norm.h).

        The standardised rows ``y`` are then written only if a reader needs them: the fused
        backward (plan_batch_norm_grads) recomputes them from x with the moments it computes
        anyway, so where it and the product are y's only readers, y is never stored -- one
        array less to write in the forward and to keep until the backward.
        """
        if not self.fuses_batch_norm_affine:
            return
        forward = {id(op) for op in self.p.forward}
        for bn in self.p.forward:
            if bn.opcode != "batch_standardize":
                continue
            y = bn.output
            scales = [r for r, _ in self.readers.get(y.id, []) if id(r) in forward and self._scales_by_weight(r, y)]
            if len(scales) != 1:
                continue
            scale = scales[0]
            self.batch_norm_affine[id(bn)] = (scale, next(v for v in scale.inputs if v.assoc == "param"))
            self.absorbed.add(id(scale))
            self.fused_into[id(scale)] = bn
            final = self.epilogues[id(scale)][2] if id(scale) in self.epilogues else scale.output
            self.extra_writes.append((final.id, bn))
            if all(self._recomputes_standardized(reader, y) for reader, _ in self.readers.get(y.id, [])
                   if reader is not scale):
                self.unwritten.add(y.id)

    def plan_kept_batch_statistics(self) -> None:
        """A fused batch norm forward keeps the batch's mean and 1/sigma for its fused backward
        (kernels/norm.h, BatchStatistics), which then does not compute them again from x: one pass
        over x fewer per batch norm and epoch, the same values."""
        if not self.keeps_batch_statistics:
            return
        for bn in self.p.backward:
            if id(bn) not in self.batch_norm_grads:
                continue
            forward = self.producer.get(bn.inputs[2].id)
            if forward is None or id(forward) not in self.batch_norm_affine or forward.inputs[0] is not bn.inputs[1]:
                continue
            name = f"batch_stats{forward.output.id}"
            self.members.append(f"mg::BatchStatistics {name};")
            self.batch_statistics[id(forward)] = self.batch_statistics[id(bn)] = name

    def _scales_by_weight(self, op, y) -> bool:
        """Whether ``op`` is ``y * gamma`` with gamma a weight of one value per feature."""
        params = [v for v in op.inputs if v.assoc == "param"]
        return (op.opcode == "mul" and id(op) not in self.absorbed and len(params) == 1
                and params[0].shape == y.shape and op.inputs.count(y) == 1)

    def _recomputes_standardized(self, op, y) -> bool:
        """Whether ``op`` needs no stored copy of the standardised rows ``y``: it is a fused batch
        norm backward of them, or runs inside one."""
        fused = self.fused_into.get(id(op), op)
        return (id(fused) in self.batch_norm_grads and fused.opcode == "batch_standardize_grad"
                and fused.inputs[2] is y)

    def plan_edge_typed_row_sums(self) -> None:
        """Both gradients of a typed linear at edge ends start by summing G's edges into the
        product rows (edge_typed_linear.h), in the scratch of their row layout: the second of two
        gradients of the same G reuses the sums where no gradient over the same layout ran in
        between (R-GCN's input and weight gradients have the add of the self-loop's gradient
        between them; only these gradients write the sums)."""
        sums_of = {}    # layout key -> the G whose row sums its scratch holds
        for op in self.p.backward:
            if op.opcode not in _EDGE_TYPED_GRAD_G:
                continue
            key = self.edge_typed_key(op)
            g = op.inputs[_EDGE_TYPED_GRAD_G[op.opcode]]
            if sums_of.get(key) is g:
                self.rows_summed.add(id(op))
            sums_of[key] = g

    def plan_edge_traversals(self) -> None:
        """Keep gathered node rows out of memory where every reader can read them in place.

        GAT's messages are ``scatter(head_mul(gather(x), alpha))`` and its attention gradient
        ``dot(gather(g), gather(x))``: each gather is an E x F copy (64 floats per edge for 8 x 8
        heads) written once and read once or twice.  A sum-scatter of a gathered value scaled by
        edge weights becomes one traversal (weighted_gather_scatter) and a dot of two gathered
        values one per-edge dot (edge_dot), both reading x at the edge's end; a gather whose
        readers are all such kernels is never run.  A sum-scatter of a stored edge value scaled
        by edge weights (HGT's messages times their attention) is the same traversal reading each
        edge's own row (weighted_edge_scatter): the scaled [E, F] product is never written.  A
        gathered value scaled by edge weights and stored (HGT's and R-GCN's message gradients) is
        written in one pass from x (weighted_gather), and a division by a graph constant (R-GCN's
        / e.rel_degree) is a product with its reciprocal in all of these.
        """
        if not self.fuses_edge_traversals:
            return
        external = {v.id for v in (self.p.loss, self.p.logits) if v is not None}

        def gathered(v):
            """(node value, end) for a gather of a stored dense node value, else None."""
            op = self.producer.get(v.id)
            if op is None or op.opcode != "gather" or v.id in external:
                return None
            x = op.inputs[0]
            if x.assoc != "node" or self._identity_rows(x) is not None or x.id in self.feature_like:
                return None
            return x, op.attrs["end"]

        in_place = set()       # (id(op), input position): a gathered input that op reads in place
        scaled_gathers = []    # (op, gathered rows, w): head_mul(gather(x), w) may write its product from x
        for op in self.p.forward + self.p.backward:
            if op.opcode == "scatter" and op.attrs["reduce"] == "sum":
                msg = op.inputs[0]
                scale = self.producer.get(msg.id)
                if scale is None or self._sole_reader(msg) is not op:
                    continue
                rows_w = self._edge_scaling(scale)
                if rows_w is None:
                    continue
                (rows, w), heads = rows_w, scale.attrs.get("heads", 1)
                src = gathered(rows)
                end = op.attrs.get("end", "dst")
                if w.assoc != "edge" or w.width != heads or rows.shape != msg.shape:
                    continue
                if src is None and self._edge_rows(rows):
                    src = (rows, "edge")       # the edge's own row, read where it lies
                if src is None or src[1] == end:
                    continue
                self.edge_scatters[id(op)] = (src[0], src[1], w, heads)
                self.absorbed.add(id(scale))
                self.fused_into[id(scale)] = op
                if src[1] != "edge":
                    in_place.add((id(scale), scale.inputs.index(rows)))    # w itself is read as stored
                self.extra_reads += [(src[0].id, op), (w.id, op)]
            elif op.opcode in ("dot", "feature_sum"):
                pair, heads = op.inputs, op.attrs.get("heads", 1)
                if op.opcode == "feature_sum":      # the heads = 1 form: feature_sum(mul(a, b))
                    prod = self.producer.get(op.inputs[0].id)
                    if prod is None or prod.opcode != "mul" or self._sole_reader(prod.output) is not op:
                        continue
                    pair = prod.inputs
                a, b = (gathered(v) or ((v, "edge") if self._edge_rows(v) else None) for v in pair)
                if a is None or b is None or pair[0].shape != pair[1].shape or a[1] == b[1] == "edge":
                    continue
                self.edge_dots[id(op)] = (a[0], a[1], b[0], b[1], heads)
                reader = op
                if op.opcode == "feature_sum":
                    self.absorbed.add(id(prod))
                    self.fused_into[id(prod)] = op
                    reader = prod
                in_place.update({(id(reader), k) for k, end in enumerate((a[1], b[1])) if end != "edge"})
                self.extra_reads += [(a[0].id, op), (b[0].id, op)]
            elif op.opcode in ("head_mul", "mul", "div") and self.traverses_edge_rows:
                rows_w = self._edge_scaling(op)
                if (rows_w is None or id(op) in self.absorbed or id(op) in self.head_products
                        or id(op) in self.epilogues):
                    continue
                (rows, w), heads = rows_w, op.attrs.get("heads", 1)
                if gathered(rows) is None or w.assoc != "edge" or w.width != heads:
                    continue
                scaled_gathers.append((op, rows, w))
                in_place.add((id(op), op.inputs.index(rows)))
        for op in self.p.forward + self.p.backward:
            readers = self.readers.get(op.output.id, []) if op.opcode == "gather" else []
            if readers and all((id(r), k) in in_place for r, k in readers) and gathered(op.output) is not None:
                self.absorbed.add(id(op))
                self.fused_into[id(op)] = readers[0][0]
        # a scaled gather reads x itself only where no other reader needs the gathered copy
        for op, rows, w in scaled_gathers:
            if id(self.producer[rows.id]) in self.absorbed:
                x, end = gathered(rows)
                self.weighted_gathers[id(op)] = (x, end, w)
                self.extra_reads.append((x.id, op))

    def plan_gathered_row_sums(self) -> None:
        """Both gradients of a typed linear at edge ends start by summing G's edges into the
        product rows.  Where G is node rows read at the edges' destinations and scaled per edge (a
        planned weighted gather: R-GCN's ``gather(g) / c``, HGT's ``head_mul(gather(g), alpha)``)
        and only such gradients read it, the sums read the node rows themselves
        (``gathered_row_sums``): the [E, F] gradient is neither written nor read back.  The
        weights must be one per edge or one per diagonal block of the product (a sum row is one
        block wide).  Destinations only: a rank of the MPI lowering owns every destination row it
        reads, so no exchange is involved."""
        for op in self.p.backward:
            if id(op) not in self.weighted_gathers or id(op) in self.absorbed:
                continue
            x, end, w = self.weighted_gathers[id(op)]
            heads = op.attrs.get("heads", 1)
            readers = self.readers.get(op.output.id, [])
            if end != "dst" or not readers or not all(
                    _EDGE_TYPED_GRAD_G.get(r.opcode) == k and id(r) not in self.absorbed
                    and heads in (1, blocks_of(r))
                    for r, k in readers):
                continue
            self.absorbed.add(id(op))
            self.fused_into[id(op)] = readers[0][0]
            for r, _ in readers:
                self.gathered_grads[id(r)] = op
                self.far_plans.add(self.edge_typed_key(r))
                self.extra_reads += [(x.id, r), (w.id, r)]

    def plan_stored_rows(self) -> None:
        """A typed linear at edge ends makes one product per distinct (node, type) pair (the
        compact layout) and copies it to each of the pair's edges.  Where every reader of the
        products is an edge traversal that reads an edge's row where it lies (a weighted scatter
        of the edge rows, in either direction; a per-head dot with node rows at destinations),
        the products stay one per pair and those traversals read each edge's through an index
        (EdgeRowLayout::store_rows): no [E, F] copy is written (HGT's keys and messages, R-GCN's
        messages).  The buffer keeps its [E, F] size, of which the first rows are used."""
        for op in self.p.forward:
            v = op.output
            if op.opcode != "edge_typed_linear" or op.attrs["layout"] != "compact":
                continue
            reads = [self._stored_row_read(r, v) for r, _ in self.readers.get(v.id, [])]
            if reads and None not in reads:
                self.stored_rows[v.id] = op
                key = self.edge_typed_key(op)
                self.stored_plans[key] = self.stored_plans.get(key, False) or "src" in reads

    def _stored_row_read(self, reader, v) -> Optional[str]:
        """Where ``reader`` walks the edges when it reads ``v`` only inside a traversal that can
        take an edge's row by index ("dst": by destination, "src": by source), else None."""
        scatter = self.fused_into.get(id(reader)) if id(reader) in self.absorbed else reader
        if scatter is not None and id(scatter) in self.edge_scatters:
            x, x_end = self.edge_scatters[id(scatter)][:2]
            return scatter.attrs.get("end", "dst") if x is v and x_end == "edge" else None
        if id(reader) in self.edge_dots:
            a, a_end, b, b_end, _ = self.edge_dots[id(reader)]
            ends = {(a.id, a_end), (b.id, b_end)}
            return "dst" if (v.id, "edge") in ends and any(end == "dst" for _, end in ends) else None
        return None

    def _stored_plan(self, v) -> str:
        """The row layout whose stored products ``v`` holds (plan_stored_rows)."""
        return self.edge_typed_plan(self.stored_rows[v.id])

    def _edge_scaling(self, op) -> Optional[tuple]:
        """(rows, weights) when ``op`` scales rows by per-head or per-edge weights: a head_mul, a
        product with an [E, 1] operand, or (where edge rows are traversed) a division by a graph
        constant such as 1 / e.rel_degree, whose reciprocal the traversal multiplies by."""
        if op.opcode == "head_mul":
            return tuple(op.inputs)
        if op.opcode not in ("mul", "div"):
            return None
        a, b = op.inputs
        if op.opcode == "mul" and (a.width == 1 or b.width == 1):
            return (a, b) if b.width == 1 else (b, a)
        if op.opcode == "div" and self.traverses_edge_rows and b.width == 1 and b.assoc == "edge":
            divisor = self.producer.get(b.id)
            if divisor is not None and divisor.opcode == "graph_scalar" and a.width != 1:
                return a, b
        return None

    def weights(self, op, w: Value) -> str:
        """The per-edge weights a traversal for ``op`` multiplies by: ``w`` itself, or for a
        division by a graph constant its reciprocal, computed once at load time."""
        if op.opcode != "div":
            return self.ptr(w)
        name = f"inv{w.id}"
        if f"mg::Buffer {name};" not in self.members:
            self.members.append(f"mg::Buffer {name};")
            self.prepare.append(f"m.{name}.allocate({self.numel(w)}, m.allocated_bytes); "
                                f"mg::op::reciprocal({self.ptr(w)}, m.{name}.data, {self.numel(w)})")
        return f"m.{name}.data"

    def _edge_rows(self, v: Value) -> bool:
        """Whether an edge traversal may read ``v`` as stored edge rows (RowAt::Edge)."""
        return self.traverses_edge_rows and v.assoc == "edge" and self._stored_plainly(v)

    def row_at(self, end: str) -> str:
        """The C++ of where a traversal reads an operand's row (runtime/op_types.h: RowAt)."""
        return {"src": "mg::RowAt::Source", "dst": "mg::RowAt::Destination", "edge": "mg::RowAt::Edge"}[end]

    def _sole_reader(self, v: Value):
        """The one op that reads ``v`` (None if several, none, or the ABI reads it)."""
        readers = self.readers.get(v.id, [])
        external = {x.id for x in (self.p.loss, self.p.logits) if x is not None}
        return readers[0][0] if len(readers) == 1 and v.id not in external else None

    def plan_edge_attention(self) -> None:
        """GAT's attention, ``edge_softmax(leaky_relu(gather(a, src) + gather(b, dst)))``, as one
        walk of each destination's edges (``edge_attention_fwd``, kernels/edge_softmax.h): the two
        gathers and their sum are never stored, and the scores only where the backward reads them.
        Five passes over [E, heads] arrays become one.
        """
        if not self.fuses_edge_attention:
            return
        for sm in self.p.forward:
            if sm.opcode != "edge_softmax":
                continue
            s = sm.inputs[0]
            act = self.producer.get(s.id)
            if act is None or act.opcode != "leaky_relu" or id(act) in self.absorbed:
                continue
            add = self.producer.get(act.inputs[0].id)
            if add is None or add.opcode != "add" or self._sole_reader(add.output) is not act:
                continue
            ends = self._gathered_ends(add, s.width)
            if ends is None:
                continue
            keep_scores = any(r is not sm for r, _ in self.readers.get(s.id, []))
            self.edge_attention[id(sm)] = (ends["src"][1], ends["dst"][1], act, keep_scores)
            for op in (ends["src"][0], ends["dst"][0], add, act):
                self.absorbed.add(id(op))
                self.fused_into[id(op)] = sm
            self.extra_reads += [(ends["src"][1].id, sm), (ends["dst"][1].id, sm)]
            if keep_scores:
                self.extra_writes.append((s.id, sm))

    def _gathered_ends(self, add, width) -> Optional[dict]:
        """{end: (gather, node value)} when ``add`` sums a gather at sources and one at
        destinations of stored node values ``width`` wide, each gather read by the add alone."""
        ends = {}
        for v in add.inputs:
            gather = self.producer.get(v.id)
            if gather is None or gather.opcode != "gather" or self._sole_reader(v) is not add:
                return None
            x = gather.inputs[0]
            if (x.assoc != "node" or x.width != width or self._identity_rows(x) is not None
                    or x.id in self.feature_like or id(gather) in self.absorbed):
                return None
            ends[gather.attrs["end"]] = (gather, x)
        return ends if set(ends) == {"src", "dst"} else None

    def plan_edge_softmax_grads(self) -> None:
        """An edge softmax's backward with the dropout_grad before it, the leaky_relu act_grad after
        it and a sum of the result at destinations, as one walk of each destination's edges
        (``edge_softmax_act_bwd``, kernels/edge_softmax.h).  Each part joins only where it is the
        sole reader of the value before it; the scatter to sources still runs on its own."""
        if not self.fuses_edge_attention:
            return
        for sg in self.p.backward:
            if sg.opcode != "edge_softmax_grad":
                continue
            drop = self.producer.get(sg.inputs[0].id)
            if (drop is None or drop.opcode != "dropout_grad" or id(drop) in self.absorbed
                    or self._sole_reader(drop.output) is not sg):
                drop = None
            act = self._sole_reader(sg.output)
            if (act is None or act.opcode != "act_grad" or act.attrs["act"] != "leaky_relu"
                    or act.inputs[0] is not sg.output or id(act) in self.absorbed):
                act = None
            de = (act or sg).output
            scatter = next((r for r, k in self.readers.get(de.id, []) if r.opcode == "scatter" and k == 0
                            and r.attrs.get("end", "dst") == "dst" and r.attrs["reduce"] == "sum"
                            and id(r) not in self.absorbed and id(r) not in self.edge_scatters), None)
            self.softmax_grads[id(sg)] = (drop, act, scatter)
            for op in (drop, act, scatter):
                if op is not None:
                    self.absorbed.add(id(op))
                    self.fused_into[id(op)] = sg
            if drop is not None:
                self.extra_reads.append((drop.inputs[0].id, sg))
            if act is not None:
                self.extra_reads.append((act.inputs[1].id, sg))
            self.extra_writes += [(v.output.id, sg) for v in (act, scatter) if v is not None]

    def plan_head_products(self) -> None:
        """A head_mul whose one reader is a row_sum or an add runs inside it (``head_mul_row_sum``,
        ``head_mul_add`` in kernels/elementwise.h): its [rows, heads x dim] product is never
        stored.  The backward of a per-head dot with a weight vector is such a pair on each side
        (dx += a * g, da = row_sum(x * g)): GAT's two attention vectors per layer take four passes
        over node rows instead of eight."""
        for op in self.p.forward + self.p.backward:
            if op.opcode != "head_mul" or id(op) in self.absorbed or id(op) in self.weighted_gathers:
                continue
            reader = self._sole_reader(op.output)
            x, s = op.inputs
            if (reader is None or id(reader) in self.absorbed or id(reader) in self.head_products
                    or id(reader) in self.epilogues or self._identity_rows(x) is not None
                    or self._identity_rows(s) is not None or x.id in self.feature_like):
                continue
            if reader.opcode == "row_sum":
                if x.assoc == "param":
                    continue
            elif reader.opcode == "add" and reader.inputs.count(op.output) == 1:
                base = next(v for v in reader.inputs if v is not op.output)
                if base.shape != op.output.shape or base.assoc != "node" or self._identity_rows(base) is not None:
                    continue
            else:
                continue
            self.head_products[id(reader)] = op
            self.absorbed.add(id(op))
            self.fused_into[id(op)] = reader
            self.extra_reads += [(x.id, reader), (s.id, reader)]

    def plan_typed_biases(self) -> None:
        """An add of a per-type bias (``typed_param``: row r is b[type of r]) to a dense or typed
        product, each read by this add alone, runs inside the product's kernel: the kernel adds
        row r's type's bias row as it writes row r, then the add's own activation.  HGT's four
        ``h * K[v.ntype] + bK[v.ntype]`` and its input projection's ``+ bin[v.ntype]`` take no
        pass of their own, and the [nodes, width] bias rows are never materialised."""
        if not self.typed_bias_epilogues:
            return
        for add in self.p.forward + self.p.backward:
            if add.opcode != "add" or id(add) in self.absorbed or id(add) in self.head_products:
                continue
            ops = [self.producer.get(v.id) for v in add.inputs]
            if any(op is None for op in ops) or add.inputs[0] is add.inputs[1]:
                continue
            kinds = [op.opcode == "typed_param" for op in ops]
            if kinds.count(True) != 1:
                continue
            param, product = (ops[0], ops[1]) if kinds[0] else (ops[1], ops[0])
            out = add.output
            if (out.assoc != "node" or any(v.assoc != "node" or v.shape != out.shape for v in add.inputs)
                    or id(param) in self.absorbed or not self._takes_epilogue(product)
                    or self._sole_reader(param.output) is not add or self._sole_reader(product.output) is not add):
                continue
            if self.epilogues.get(id(add), (None,))[0] is not None:
                continue                  # the add's own bias_add: one bias per epilogue
            table = param.inputs[0]
            self._run_inside(add, product, bias=table)
            self.bias_types[id(product)] = self.type_expr(table.domain)
            self.absorbed.add(id(param))
            self.fused_into[id(param)] = product

    def _run_inside(self, add, product, bias: Optional[Value] = None) -> None:
        """``add`` runs in ``product``'s kernel, with whatever had been fused into the add: its
        bias and activation become the product's epilogue (``bias``, when given, stands in for
        the add's missing one), writing the add's value or the tail's last."""
        own_bias, act, final = self.epilogues.pop(id(add), (None, None, add.output))
        self.epilogues[id(product)] = (bias if bias is not None else own_bias, act, final)
        self.absorbed.add(id(add))
        for op, into in list(self.fused_into.items()):
            if into is add:
                self.fused_into[op] = product
        self.fused_into[id(add)] = product

    def _takes_epilogue(self, op) -> bool:
        """Whether ``op``'s kernel runs an epilogue written per row (apply_epilogue_rows: bias,
        per-type bias, activation, residual) and none is planned for it yet: a dense product
        (input features included, in either format), its input gradient, and the typed linear
        and its input gradient."""
        if (id(op) in self.absorbed or id(op) in self.epilogues or op.output.assoc != "node"
                or blocks_of(op) != 1):       # its kernel sees B rows per row: no row epilogue
            return False
        if op.opcode in ("linear", "typed_linear"):
            return op.inputs[0].assoc == "node" and self._identity_rows(op.inputs[0]) is None
        return op.opcode in ("matmul_nt", "typed_matmul_nt")

    def plan_residual_adds(self) -> None:
        """An add of two node values, one computed by a dense product or an aggregation that only
        this add reads, runs inside that op's kernel: the kernel adds the other operand (the
        residual, computed earlier) to each row it has just written, then the add's own fused bias
        and activation, if any.  SAGE's sum of its two products, forward and backward, takes no
        pass of its own (three fewer reads and writes of a [nodes, hidden] array per layer).
        Planned last, so the add keeps any other kernel that claimed it (a head product)."""
        if not self.residual_epilogues:
            return
        order = {id(op): i for i, op in enumerate(self.p.forward + self.p.backward)}
        in_forward = lambda op: order[id(op)] < len(self.p.forward)      # noqa: E731
        for add in self.p.forward + self.p.backward:
            if (add.opcode != "add" or id(add) in self.absorbed or id(add) in self.head_products
                    or add.inputs[0] is add.inputs[1]):
                continue
            out = add.output
            if out.assoc != "node" or any(v.assoc != "node" or v.shape != out.shape for v in add.inputs):
                continue
            position = [order.get(id(self.producer.get(v.id)), -1) for v in add.inputs]
            late = 0 if position[0] > position[1] else 1
            product, residual = self.producer.get(add.inputs[late].id), add.inputs[1 - late]
            if (product is None or id(product) not in order or in_forward(product) != in_forward(add)
                    or not self._takes_residual(product) or self._sole_reader(product.output) is not add
                    or not self._stored_plainly(residual)):
                continue
            self.residuals[id(product)] = residual
            self._run_inside(add, product)
            self.extra_reads.append((residual.id, product))

    def plan_scaled_operands(self) -> None:
        """A constant ``scale`` whose one reader is an add or sub of two full arrays runs inside
        it (``scaled_add``, kernels/elementwise.h): the scaled array is never stored, and
        ``a * ca + b * cb`` takes one pass instead of two or three.  APPNP's ``0.9 * A_hat h +
        0.1 * h0`` in each step and its gradient's share of h0, GCNII's ``(1 - beta) p + beta
        p W`` in each layer.  Planned after the kernels that claim adds for themselves."""
        epoch = {id(op) for op in self.p.forward + self.p.backward}    # a scale computed once stays stored
        for op in self.p.forward + self.p.backward:
            if (op.opcode not in ("add", "sub") or id(op) in self.absorbed or id(op) in self.head_products
                    or id(op) in self.weighted_gathers or op.inputs[0] is op.inputs[1]):
                continue
            out = op.output
            if out.assoc not in ("node", "edge") or any(v.assoc != out.assoc or v.shape != out.shape
                                                        or not self._stored_plainly(v) for v in op.inputs):
                continue
            factors, reads = [], []
            for v in op.inputs:
                scale = self.producer.get(v.id)
                if (scale is not None and scale.opcode == "scale" and id(scale) in epoch and self._sole_reader(v) is op
                        and id(scale) not in self.absorbed and id(scale) not in self.epilogues
                        and scale.inputs[0].shape == out.shape and self._stored_plainly(scale.inputs[0])):
                    factors.append((float(scale.attrs["c"]), scale.inputs[0]))
                    reads.append(scale)
                else:
                    factors.append((1.0, v))
            if not reads:
                continue
            if op.opcode == "sub":
                factors[1] = (-factors[1][0], factors[1][1])
            self.scaled_operands[id(op)] = factors
            for scale in reads:
                self.absorbed.add(id(scale))
                self.fused_into[id(scale)] = op
                self.extra_reads.append((scale.inputs[0].id, op))

    def _takes_residual(self, op) -> bool:
        """Whether ``op``'s kernel runs an epilogue with a residual: a dense or typed product
        (_takes_epilogue) or a forward sum/mean aggregation without edge weights, not already
        fused with anything."""
        if self._takes_epilogue(op):
            return True
        return (op.opcode == "aggregate" and id(op) not in self.absorbed and id(op) not in self.epilogues
                and op.output.assoc == "node" and len(op.inputs) == 1
                and op.attrs.get("direction", "in") == "in" and op.attrs["reduce"] != "max")

    def _stored_plainly(self, v: Value) -> bool:
        """Whether ``v`` is a [rows, width] array in memory when its kernels run (a buffer or an
        invariant's view), not features in their own format, identity rows or a fused value."""
        return v.id not in self.feature_like and self._identity_rows(v) is None and v.id not in self.unstored_values()

    @staticmethod
    def _fusable_aggregate(group) -> bool:
        head = group.ops[0]
        return (group.kind == "aggregate_epilogue" and head.opcode == "aggregate"
                and head.attrs.get("direction", "in") == "in" and head.attrs["reduce"] != "max")

    def _fusable_linear(self, group) -> bool:
        """A plain dense product: the input-feature paths and featureless rows have their own kernels."""
        if group.kind != "linear_epilogue":
            return False        # other groups may start with an op that reads nothing (graph_scalar)
        x = group.ops[0].inputs[0]
        return x.assoc == "node" and x.id not in self.feature_like and self._identity_rows(x) is None

    def _fusable_binary(self, group) -> bool:
        """A node-wise arithmetic op over stored operands (identity rows are never stored)."""
        return group.kind == "binary_epilogue" and all(
            self._identity_rows(v) is None for v in group.ops[0].inputs)

    def _epilogue(self, op) -> tuple:
        """(`, mg::Epilogue{...}`, the value the kernel writes) for an op whose bias/activation
        tail runs inside it; ('', op.output) otherwise."""
        struct, final = self._epilogue_struct(op)
        return (f", {struct}" if struct else ""), final

    def _epilogue_struct(self, op) -> tuple:
        """(`mg::Epilogue{...}` or '', the value the kernel writes): _epilogue's parts."""
        if id(op) not in self.epilogues:
            return "", op.output
        bias, act, final = self.epilogues[id(op)]
        self.epilogues_run.add(id(op))
        kind = _EPILOGUE_ACT[act.opcode] if act is not None else "mg::Act::None"
        alpha = _float(act.attrs.get("alpha", _ACT_DEFAULT_ALPHA.get(act.opcode, 0.0))) if act else "0.0"
        fields = [self.ptr(bias) if bias is not None else "nullptr", kind, f"{alpha}f",
                  self.ptr(self.residuals[id(op)]) if id(op) in self.residuals else "nullptr",
                  self.bias_types.get(id(op), "nullptr")]
        while len(fields) > 3 and fields[-1] == "nullptr":      # trailing defaults left out
            fields.pop()
        return f"mg::Epilogue{{{', '.join(fields)}}}", final

    def share_buffers(self) -> dict:
        """Let values whose lifetimes do not overlap share one buffer (liveness over the epoch).

        Lifetimes come from passes.lifetimes, the rule the memory report uses too, told where
        this backend's fused kernels write and read: a fused epilogue writes the chain's final
        value at its head, a fused dropout backward reads the dropout's input gradient.  Only
        buffers of identical size are shared, and never between an op's inputs and its output.
        Returns (value id -> shared buffer name, the shared buffers).
        """
        order = self.p.forward + self.p.backward
        step = {id(op): i for i, op in enumerate(order)}
        defined_at = {final.id: step[head] for head, (_, _, final) in self.epilogues.items()}
        defined_at.update((vid, step[id(op)]) for vid, op in self.extra_writes)
        read_at = [(drop.inputs[0].id, step[id(self.producer[vid])])
                   for vid, drop in self.fused_dropout_grad.items()]
        read_at += [(vid, step[id(op)]) for vid, op in self.extra_reads]
        live = lifetimes(self.p, order, defined_at, read_at)
        by_id = {b["id"]: b for b in self.buffers}
        pools: dict = {}                 # numel expression -> [(shared name, free from op index)]
        plan, shared = {}, []
        for vid in sorted(by_id, key=lambda i: live[i][0]):
            start, stop = live[vid]
            pool = pools.setdefault(by_id[vid]["numel"], [])
            slot = next((k for k, (_, free) in enumerate(pool) if free < start), None)
            if slot is None:
                target = f"b{len(shared)}"
                shared.append({"name": target, "numel": by_id[vid]["numel"], "comment": by_id[vid]["comment"]})
                pool.append((target, stop))
            else:
                target = pool[slot][0]
                pool[slot] = (target, stop)
            plan[vid] = target
        return plan, shared

    def lower_optimizer(self) -> list:
        o = self.p.optimizer
        out = []
        for i, prm in enumerate(self.p.params):
            g = self.p.grads.get(prm.name)
            if g is None:
                continue       # a weight the loss does not depend on stays as initialised
            wd = _float(prm.decay(o))
            n = self.numel(prm.value)
            if g.id in self.row_grads:
                plan, rows, width = self.row_grads[g.id]
                call = (f"mg::op::adam_rows({'true' if o.kind == 'adamw' else 'false'}, m.p{i}.data, {self.ptr(g)}, "
                        f"m.m{i}.data, m.s{i}.data, {rows}, {width}, {plan}, {_float(o.lr)}, {_float(o.beta1)}, "
                        f"{_float(o.beta2)}, {_float(o.eps)}, {wd}, step)")
            elif o.kind in ("adam", "adamw"):
                call = (f"mg::op::adam({'true' if o.kind == 'adamw' else 'false'}, m.p{i}.data, {self.ptr(g)}, "
                        f"m.m{i}.data, m.s{i}.data, {n}, {_float(o.lr)}, {_float(o.beta1)}, {_float(o.beta2)}, "
                        f"{_float(o.eps)}, {wd}, step)")
            elif o.kind == "sgd":
                buf = f"m.m{i}.data" if o.momentum else "nullptr"
                call = (f"mg::op::sgd(m.p{i}.data, {self.ptr(g)}, {buf}, {n}, {_float(o.lr)}, "
                        f"{_float(o.momentum)}, {wd}, step)")
            else:
                raise InternalError(f"unknown optimizer {o.kind}")
            out.append(self.timed("optimizer", call, f"16.0 * {n}", f"10.0 * {n}"))
        return out

    # ---- featureless input: rows of the one-hot identity, never materialised ---------------------
    def feature_identity(self) -> _Identity:
        """Row r of the input features is the one-hot of node r."""
        return _Identity(None)

    def edge_end_identity(self, end: str) -> _Identity:
        """The identity rows gathered at each edge's source or destination."""
        return _Identity("m.graph.col" if end == "src" else self.edge_dst())

    # ---- op lowerings: one method per opcode ----------------------------------------------------
    def _identity_rows(self, v: Value) -> Optional[_Identity]:
        return self.identity.get(v.id)

    def op_graph_scalar(self, op):
        kind, out = op.attrs["kind"], op.output
        sl = "true" if op.attrs.get("self_loops") else "false"
        call = {"in_degree": f"mg::op::in_degree(m.g, {self.ptr(out)})",
                "out_degree": f"mg::op::out_degree(m.g, {self.ptr(out)})",
                "rel_degree": f"mg::op::rel_degree(m.g, {self.ptr(out)})",
                "edge_weight": f"mg::op::edge_weight(m.g, {self.ptr(out)})",
                "gcn_norm": f"mg::op::gcn_norm(m.g, {sl}, {self.ptr(out)})",
                "mean_norm": f"mg::op::mean_norm(m.g, {sl}, {self.ptr(out)})"}[kind]
        if kind in ("gcn_norm", "mean_norm"):
            self.require("edge_dst")
        if kind == "rel_degree":
            self.require("etypes")
        self.prepare.append(call)      # a constant of the graph: computed once at load time
        self.note_kernel(call.split("(", 1)[0])
        return None

    def op_linear(self, op, x, w):
        out = op.output
        M = self.width(out)
        ident = self._identity_rows(x)
        if ident is not None:
            if ident.idx is None:
                return self.timed("gemm", f"mg::op::copy({self.ptr(w)}, {self.ptr(out)}, {self.numel(out)})",
                                  f"8.0 * {self.numel(out)}")
            return self.timed("typed_linear", f"mg::op::embedding_rows({self.ptr(w)}, nullptr, {ident.idx}, "
                              f"{self.rows(out)}, {self.identity_nodes}, {M}, {self.ptr(out)})", f"8.0 * {self.numel(out)}")
        K = self.width(x)
        flops = f"2.0 * {self.rows(x)} * {K} * {M}"
        bytes_ = f"4.0 * ({self.rows(x)} * ({K} + {M}) + {K} * {M})"
        epilogue, out = self._epilogue(op)
        if x.id in self.feature_like:
            fv = self.feature_like[x.id]
            return self.timed("input_features", f"mg::op::linear_features({fv}, {self.feature_blocks()}, {self.ptr(w)}, "
                              f"{M}, {self.ptr(out)}{epilogue})", *self._feature_cost(fv, M))
        if self._head_on_logit_rows(op):
            rows = self.visited_rows("m.logit_rows", self.rows(x))
            return self.timed("gemm", f"mg::op::linear_masked_rows({self.logit_rows()}, {self.ptr(x)}, {self.rows(x)}, "
                              f"{K}, {self.ptr(w)}, {M}, {self.ptr(out)}{epilogue})",
                              f"4.0 * ({rows} * ({K} + {M}) + {K} * {M})", f"2.0 * {rows} * {K} * {M}")
        return self.timed("gemm", f"mg::op::linear({self.ptr(x)}, {self.rows(x)}, {K}, {self.ptr(w)}, {M}, "
                          f"{self.ptr(out)}{epilogue})", bytes_, flops)

    def on_logit_rows(self, v: Value) -> bool:
        """Whether every reader of ``v`` reads the rows the logits are needed on alone
        (`m.logit_rows`: a training epoch's training rows, an evaluation's labelled rows, every row
        for a prediction), so that its producer may compute just those: the logits when only the
        cross entropy and its gradient read them, and a value read only row by row by products or
        fused tails that compute such rows, or by weight gradients reduced over the training rows."""
        if not self.train_rows:
            return False
        if v.id not in self.logit_row_values:
            self.logit_row_values[v.id] = False          # a cycle cannot make itself true
            readers = self.readers.get(v.id, [])
            self.logit_row_values[v.id] = bool(readers) and all(self._reads_logit_rows(r, k) for r, k in readers)
        return self.logit_row_values[v.id]

    def _reads_logit_rows(self, reader, k: int) -> bool:
        if reader.opcode in ("cross_entropy", "cross_entropy_grad"):
            return k == 0
        if reader.opcode == "matmul_tn":
            return k == 0 and self.reduces_over_train_rows(reader)
        head = self.fused_into.get(id(reader))
        if head is not None:            # a bias, activation or residual inside its head's kernel: on its rows
            return (reader.opcode in ("bias_add", "add", "sub") or reader.opcode in _EPILOGUE_ACT) and \
                head.opcode in ("linear", "aggregate") and self._head_on_logit_rows(head)
        return reader.opcode == "linear" and k == 0 and self._head_on_logit_rows(reader)

    def _head_on_logit_rows(self, op) -> bool:
        """Whether ``op``'s kernel computes the logit rows alone: a dense product or a sum/mean
        aggregation over in-edges whose result (its fused tail's last value) is on the logit rows."""
        final = self.epilogues[id(op)][2] if id(op) in self.epilogues else op.output
        if op.opcode == "linear":
            x = op.inputs[0]
            if x.id in self.feature_like or self._identity_rows(x) is not None:
                return False
        elif op.opcode != "aggregate" or op.attrs["reduce"] == "max" or op.attrs.get("direction", "in") != "in":
            return False
        return self.on_logit_rows(final)

    def op_matmul_nt(self, op, g, w):
        K, M = self.width(op.output), self.width(g)
        epilogue, out = self._epilogue(op)
        return self.timed("gemm", f"mg::op::matmul_nt({self.ptr(g)}, {self.rows(g)}, {M}, {self.ptr(w)}, {K}, "
                          f"{self.ptr(out)}{epilogue})", f"4.0 * ({self.rows(g)} * ({K} + {M}) + {K} * {M})",
                          f"2.0 * {self.rows(g)} * {K} * {M}")

    def op_matmul_tn(self, op, x, g):
        out = op.output
        M = self.width(g)
        ident = self._identity_rows(x)
        if ident is not None:
            if ident.idx is None:
                return self.timed("gemm", f"mg::op::copy({self.ptr(g)}, {self.ptr(out)}, {self.numel(out)})",
                                  f"8.0 * {self.numel(out)}")
            plan = self.plan("nullptr", ident.idx, "1", g)
            return self._embedding_grad(plan, g, self.identity_nodes, M, out)
        K = self.width(x)
        flops = f"2.0 * {self.rows(x)} * {K} * {M}"
        bytes_ = f"4.0 * ({self.rows(x)} * ({K} + {M}) + {K} * {M})"
        if x.id in self.feature_like:
            fv = self.feature_like[x.id]
            return self.timed("input_features_grad", f"mg::op::matmul_tn_features({fv}, "
                              f"{self.feature_blocks()}, {self.ptr(g)}, {M}, {self.ptr(out)})", *self._feature_cost(fv, M))
        if self.reduces_over_train_rows(op):
            rows = self.visited_rows(f"&{self.train_rows_plan()}", self.rows(x))
            return self.timed("gemm", f"mg::op::matmul_tn_train_rows{self.narrow_tn_width(g)}({self.train_rows_plan()}, "
                              f"{self.ptr(x)}, {self.rows(x)}, {K}, {self.ptr(g)}, {M}, {self.ptr(out)})",
                              f"4.0 * ({rows} * ({K} + {M}) + {K} * {M})", f"2.0 * {rows} * {K} * {M}")
        return self.timed("gemm", f"mg::op::matmul_tn{self.narrow_tn_width(g)}({self.ptr(x)}, {self.rows(x)}, "
                          f"{K}, {self.ptr(g)}, {M}, {self.ptr(out)})", bytes_, flops)

    def train_rows_plan(self) -> str:
        """The training rows as one group (ops.h MaskedRows), built once at load time from the mask."""
        return self._masked_rows("train_rows", "m.masks[0]")

    def logit_rows(self) -> str:
        """The rows the logits are needed on, set by the ABI before each forward: the training
        rows, the labelled rows, or none (every row)."""
        self.train_rows_plan()
        self._masked_rows("labelled_rows", "m.masks[0], m.masks[1], m.masks[2]")
        if "const mg::op::MaskedRows *logit_rows = nullptr;" not in self.members:
            self.members.append("const mg::op::MaskedRows *logit_rows = nullptr;")
        return "m.logit_rows"

    def _masked_rows(self, name: str, masks: str) -> str:
        if f"mg::op::MaskedRows {name};" not in self.members:
            self.members.append(f"mg::op::MaskedRows {name};")
            self.extra_bytes.append(f"m.{name}.bytes()")
            self.prepare.append(f"mg::op::build_masked_rows(m.{name}, m.graph.num_nodes, {masks})")
        return f"m.{name}"

    @staticmethod
    def visited_rows(only: str, rows: str) -> str:
        """The rows a kernel given the row set ``only`` visits, of ``rows`` (ops.h visited_rows)."""
        return f"mg::op::visited_rows({only}, {rows})"

    def narrow_tn_width(self, g: Value) -> str:
        """The template argument that sends a dense weight gradient X^T G whose G is at most
        NARROW_TN_MAX wide, a width known here, to tall_skinny.h's narrow kernel (AVX-512: X's rows
        loaded, G's values broadcast; SAGE's last-layer gradients on the flickr-shaped graph 1.0-1.1
        -> 0.50-0.63 ms each).  Every width's instance is compiled once, in the op layer
        (ops.cpp), not in the program's own build."""
        width = g.shape[-1] if g.shape else 1
        narrow = self.narrow_tn_by_width and isinstance(width, int) and 0 < width <= NARROW_TN_MAX
        return f"<{width}>" if narrow else ""

    def feature_blocks(self) -> str:
        """The blocked copy of sparse input features, built once at load time (nothing on the dense path)."""
        if "mg::SparseFeatureBlocks features_blocks;" not in self.members:
            self.members.append("mg::SparseFeatureBlocks features_blocks;")
            self.extra_bytes.append("m.features_blocks.bytes()")
            self.prepare.append("mg::op::build_feature_blocks(m.features, m.features_blocks)")
        return "m.features_blocks"

    def _feature_cost(self, fv: str, M: str) -> tuple:
        """(bytes, flops) of a product of the input features with an [F, M] weight, either path:
        sparse streams 6 bytes per non-zero (16-bit column, value) and the rows of the output."""
        values = f"mg::op::feature_values({fv})"
        rows, cols = f"{fv}.rows", f"{fv}.cols"
        return (f"({fv}.kind == mg::FeatureKind::Csr ? 6.0 * {values} + 8.0 * {rows} * {M} + 4.0 * {cols} * {M} : "
                f"4.0 * ({values} + {rows} * {M} + {cols} * {M}))", f"2.0 * {values} * {M}")

    def op_typed_linear(self, op, x, w):
        out = op.output
        blocks = blocks_of(op)
        K, M = self._block_dims(op, w.shape[1], w.shape[2])
        ident = self._identity_rows(x)
        if ident is not None:
            if blocks != 1:
                raise self._blocked_featureless(op)
            idx = ident.idx or self.node_ids()
            return self.timed("typed_linear", f"mg::op::embedding_rows({self.ptr(w)}, {self.type_expr(w.domain)}, "
                              f"{idx}, {self.rows(out)}, {self.identity_nodes}, {M}, {self.ptr(out)})",
                              f"8.0 * {self.numel(out)}")
        epilogue, out = self._epilogue(op)
        rows = f"{self.rows(x)} * {blocks}"
        return self.timed("typed_linear", f"mg::op::typed_linear({self.typed_groups(op, w.domain)}, {self.ptr(x)}, {K}, "
                          f"{self.ptr(w)}, {M}, {self.ptr(out)}{epilogue})",
                          f"4.0 * {rows} * (2.0 * {K} + 2.0 * {M})", f"2.0 * {rows} * {K} * {M}")

    def op_typed_matmul_nt(self, op, g, w):
        K, M = self._block_dims(op, w.shape[1], w.shape[2])
        epilogue, out = self._epilogue(op)
        return self.timed("typed_linear", f"mg::op::typed_matmul_nt({self.typed_groups(op, w.domain)}, {self.ptr(g)}, "
                          f"{M}, {self.ptr(w)}, {K}, {self.ptr(out)}{epilogue})", "0",
                          f"2.0 * {self.rows(g)} * {blocks_of(op)} * {K} * {M}")

    def op_typed_matmul_tn(self, op, x, g):
        out = op.output
        domain = op.attrs["domain"]
        K, M = self._block_dims(op, out.shape[1], out.shape[2])
        ident = self._identity_rows(x)
        if ident is not None:
            if blocks_of(op) != 1:
                raise self._blocked_featureless(op)
            idx = ident.idx or self.node_ids()
            plan = self.plan(self.type_expr(domain), idx, self.dim(out.shape[0]), g)
            return self._embedding_grad(plan, g, f"{self.dim(out.shape[0])} * {self.identity_nodes}", M, out)
        return self.timed("typed_linear", f"mg::op::typed_matmul_tn({self.typed_groups(op, domain)}, {self.ptr(x)}, "
                          f"{K}, {self.ptr(g)}, {M}, {self.ptr(out)})", "0",
                          f"2.0 * {self.rows(g)} * {blocks_of(op)} * {K} * {M}")

    def _embedding_grad(self, plan: str, g: Value, table_rows: str, M: str, out: Value) -> str:
        """The gradient of a table read by lookups (featureless input): the looked-up rows get
        their sums.  When it is a weight's gradient that only Adam reads, the other rows, zero,
        are neither written here nor read by the step (adam_rows): on R-GCN's per-relation
        tables (aifb: 90 x 8,285 x 16 floats) only the few percent of rows an edge reads."""
        if self.keeps_rows_only(out):
            self.row_grads[out.id] = (plan, table_rows, M)
            return self.timed("typed_linear", f"mg::op::embedding_rows_grad_rows({plan}, {self.ptr(g)}, {M}, "
                              f"{self.ptr(out)})", f"8.0 * {self.numel(g)}")
        return self.timed("typed_linear", f"mg::op::embedding_rows_grad({plan}, {self.ptr(g)}, {table_rows}, {M}, "
                          f"{self.ptr(out)})", f"8.0 * {self.numel(g)}")

    def keeps_rows_only(self, grad: Value) -> bool:
        """Whether the table gradient ``grad`` keeps only its looked-up rows: on a backend whose
        step can read rows (``row_gradients``), where only Adam reads it."""
        return self.row_gradients and self.only_adam_reads(grad)

    def only_adam_reads(self, grad: Value) -> bool:
        """Whether ``grad`` is a weight's gradient that nothing but an Adam / AdamW step reads."""
        return (self.param_of_gradient(grad) is not None and not self.readers.get(grad.id)
                and self.p.optimizer.kind in ("adam", "adamw"))

    def param_of_gradient(self, grad: Value) -> Optional[Value]:
        """The weight whose gradient ``grad`` is, or None."""
        return next((prm.value for prm in self.p.params
                     if self.p.grads.get(prm.name) is not None and self.p.grads[prm.name].id == grad.id), None)

    # ---- featureless lookups of basis-decomposed weights (passes/basis_lookup.py) ----------------
    def basis_plan(self, x: Value, domain: str) -> str:
        """The lookups' BasisLookupPlan, built once at load time (one per lookup set)."""
        ident = self._identity_rows(x)
        if ident is None:
            raise InternalError("typed_linear_bases of stored rows: the pass makes it only for featureless rows")
        types = self.groups(domain) + ".types"
        key = ("bases", self.type_expr(domain), ident.idx or self.node_ids(), types, x.assoc)
        if key not in self.plans:
            name = f"plan{len(self.plans)}"
            self.plans[key] = name
            self.members.append(f"mg::op::BasisLookupPlan {name};")
            self.prepare.append(f"m.{name}.build({key[1]}, {key[2]}, {self.rows(x)}, {types}, {self.identity_nodes})")
        return f"m.{self.plans[key]}"

    def op_typed_linear_bases(self, op, x, a, v):
        return self._basis_lookup("basis_lookup", x, a.domain, f"{self.ptr(a)}, {self.ptr(v)}", v.shape[0],
                                  op.output, op.output, self.numel(op.output), bases_value=v)

    def op_typed_linear_bases_coef_grad(self, op, x, g, v):
        return self._basis_lookup("basis_lookup_coef_grad", x, op.attrs["domain"], f"{self.ptr(v)}, {self.ptr(g)}",
                                  v.shape[0], g, op.output, self.numel(g), bases_value=v)

    def basis_storage(self, bases: Value, plan: str) -> tuple:
        """The plan and the rows per basis through which the lookups' kernels read the bases
        ``bases``: the lookups' plan and every node (the MPI backend's packed bases differ)."""
        return plan, self.identity_nodes

    def op_typed_linear_bases_grad(self, op, x, a, g):
        return self._basis_lookup("basis_lookup_bases_grad", x, a.domain, f"{self.ptr(a)}, {self.ptr(g)}",
                                  a.shape[1], g, op.output, f"{self.numel(op.output)} + {self.numel(g)}")

    def _basis_lookup(self, kernel: str, x: Value, domain: str, operands: str, bases, rows: Value, out: Value,
                      streamed: str, bases_value: Optional[Value] = None) -> str:
        """A call of one of the basis lookups' kernels: B x M multiply-adds per distinct (row, type)
        pair of the plan, ``rows`` [.., M] the lookups' rows, ``streamed`` the other floats moved;
        ``bases_value``: the bases V the kernel reads (basis_storage)."""
        plan, B, M = self.basis_plan(x, domain), self.dim(bases), self.width(rows)
        kernel_plan, per_basis = (self.basis_storage(bases_value, plan) if bases_value is not None
                                  else (plan, self.identity_nodes))
        combined = f"{plan}.by_row.unique * {B} * {M}"
        summed = ""
        if self.shares_basis_lookup_sums and kernel != "basis_lookup":
            # The coefficients' and the bases' gradients of one G: the second reads the sums the
            # first made, where no gradient of the same plan ran in between (only these write
            # the plan's scratch; calls are lowered in program order).
            summed = ", true" if self.lookup_sums_of.get(plan) is rows else ""
            self.lookup_sums_of[plan] = rows
        return self.timed("typed_linear", f"mg::op::{kernel}({kernel_plan}, {operands}, {B}, {per_basis}, {M}, "
                          f"{self.ptr(out)}{summed})", f"4.0 * ({combined} + {streamed})", f"2.0 * {combined}")

    # ---- typed linears of node rows read at edge ends (passes/edge_typed_linear.py) ---------------
    def edge_typed_plan(self, op) -> str:
        """The product rows (one per distinct (node, edge type) pair at ``end``, or one per edge),
        built once at load time; the ops of one end, layout and block count share them and their
        scratch.  With B diagonal blocks the rows are those of B times the edges, node b of node n
        being n's columns of block b and type b of type t weight W[t]'s block b: the kernels run a
        block-diagonal product as plain products one block wide.  ``op``: an edge typed op."""
        end, layout, blocks = layout_key = self.edge_typed_key(op)
        key = ("edge_typed",) + layout_key
        if key not in self.plans:
            name = f"plan{len(self.plans)}"
            self.plans[key] = name
            ends = "m.graph.col" if end == "src" else self.edge_dst()
            # what gradient sums from node rows (far ends) and products stored by row need; named
            # only when needed (the CUDA op layer's build takes neither)
            far, stored = layout_key in self.far_plans, layout_key in self.stored_plans
            extra = f", {self.edge_dst() if far else 'nullptr'}" if far or stored else ""
            extra += f", true, {'true' if self.stored_plans[layout_key] else 'false'}" if stored else ""
            self.members.append(f"mg::op::EdgeTypedRows {name};")
            self.extra_bytes.append(f"m.{name}.bytes()")
            self.prepare.append(f"mg::op::build_edge_typed_rows(m.{name}, {ends}, {self.type_expr('etype')}, "
                                f"m.graph, {'true' if layout == 'compact' else 'false'}, {blocks}{extra})")
        return f"m.{self.plans[key]}"

    @staticmethod
    def edge_typed_key(op) -> tuple:
        """(end, layout, blocks): the row layout an edge typed op runs over."""
        return op.attrs["end"], op.attrs["layout"], blocks_of(op)

    def _edge_typed_features(self, x: Value) -> bool:
        """Whether x is the input features, read in their own format (dense or CSR: the sparse
        feature path stays open) rather than as a dense buffer."""
        return self.edge_typed_feature_views and x.id == self.features_id and x.id in self.feature_like

    def _edge_typed_call(self, kernel: str, op, operands: str, K: str, M: str, x_values: bool = False) -> str:
        """One of the kernels: 2KM flops per product row (2M per stored value of its x row when x
        is the features, ``x_values``); the rows' reads or writes, the edges' M-wide ones and the
        weights moved (K and M one block's, the rows and edges B times as many)."""
        blocks = blocks_of(op)
        plan = self.edge_typed_plan(op)
        row_values = f"(double(mg::op::feature_values(m.features)) / m.features.rows)" if x_values else K
        gathered = self.gathered_grads.get(id(op))
        sums = []
        if gathered is not None and id(op) not in self.rows_summed:
            x, _, w = self.weighted_gathers[id(gathered)]
            heads = gathered.attrs.get("heads", 1)
            sums.append(self.timed("typed_linear", f"mg::op::gathered_row_sums({plan}, {self.ptr(x)}, "
                                   f"{self.weights(gathered, w)}, {blocks if heads == 1 else 1}, {M})",
                                   f"4.0 * m.graph.num_edges * {blocks} * (3.0 + {M}) + 4.0 * {plan}.rows() * {M}",
                                   f"2.0 * m.graph.num_edges * {blocks} * {M}"))
        # the kernels' last flag: a gradient's G rows already summed, or the forward's products stored by row
        flag = id(op) in self.rows_summed or gathered is not None or op.output.id in self.stored_rows
        tail = ", true" if flag else ""
        return sums + [self.timed("typed_linear", f"mg::op::{kernel}({plan}, {operands}, {self.ptr(op.output)}{tail})",
                                  f"4.0 * ({plan}.rows() * {row_values} + m.graph.num_edges * {blocks} * {M} + "
                                  f"m.graph.num_etypes * {blocks} * {K} * {M})",
                                  f"2.0 * {plan}.rows() * {row_values} * {M}")]

    def _block_dims(self, op, k, m) -> tuple:
        """(K, M) of one diagonal block of a typed weight [T, B*K, M] (the whole K without blocks)."""
        blocks = blocks_of(op)
        return self.dim(k // blocks if blocks != 1 else k), self.dim(m)

    def _edge_typed_block(self, op, k, m) -> tuple:
        if blocks_of(op) != 1 and self._edge_typed_features(op.inputs[0]):
            raise UnsupportedInput(op, "a block-diagonal weight cannot multiply the input features; project "
                                       "them with a plain weight first")
        return self._block_dims(op, k, m)

    def op_edge_typed_linear(self, op, x, w):
        K, M = self._edge_typed_block(op, w.shape[1], w.shape[2])
        if self._edge_typed_features(x):
            return self._edge_typed_call("edge_typed_linear_features", op, f"m.features, {self.ptr(w)}, {M}", K, M,
                                         x_values=True)
        return self._edge_typed_call("edge_typed_linear", op, f"{self.ptr(x)}, {K}, {self.ptr(w)}, {M}", K, M)

    def op_edge_typed_linear_input_grad(self, op, g, w):
        K, M = self._edge_typed_block(op, w.shape[1], w.shape[2])
        return self._edge_typed_call("edge_typed_linear_input_grad", op,
                                     f"{self._edge_grad_rows(op, g)}, {M}, {self.ptr(w)}, {K}", K, M)

    def op_edge_typed_linear_weight_grad(self, op, x, g):
        K, M = self._edge_typed_block(op, op.output.shape[1], op.output.shape[2])
        if self._edge_typed_features(x):
            return self._edge_typed_call("edge_typed_linear_weight_grad_features", op,
                                         f"m.features, {self._edge_grad_rows(op, g)}, {M}", K, M, x_values=True)
        return self._edge_typed_call("edge_typed_linear_weight_grad", op,
                                     f"{self.ptr(x)}, {K}, {self._edge_grad_rows(op, g)}, {M}", K, M)

    def _edge_grad_rows(self, op, g) -> str:
        """G of an edge typed gradient: stored edge rows, or nullptr where the product rows' sums
        are made from node rows instead (plan_gathered_row_sums) and G itself never exists."""
        return "nullptr" if id(op) in self.gathered_grads else self.ptr(g)

    def op_typed_param(self, op, w):
        out = op.output
        return self.timed("typed_linear", f"mg::op::embedding_rows({self.ptr(w)}, {self.type_expr(w.domain)}, nullptr, "
                          f"{self.rows(out)}, 1, {self.width(out)}, {self.ptr(out)})", f"8.0 * {self.numel(out)}")

    def op_typed_row_sum(self, op, g):
        return self.timed("typed_linear", f"mg::op::typed_row_sum({self.groups(op.attrs['domain'])}, {self.ptr(g)}, "
                          f"{self.width(g)}, {self.ptr(op.output)})", f"4.0 * {self.numel(g)}")

    def op_gather(self, op, x):
        out = op.output
        ident = self._identity_rows(x)
        if ident is not None:
            if x.id != self.features_id:
                raise InternalError("gather of gathered featureless rows")
            self.identity[out.id] = self.edge_end_identity(op.attrs["end"])
            return None
        return self.timed("edges", f"mg::op::gather(m.g, {'true' if op.attrs['end'] == 'src' else 'false'}, "
                          f"{self.ptr(x)}, {self.width(x)}, {self.ptr(out)})", f"8.0 * {self.numel(out)}")

    def op_scatter(self, op, msg):
        out = op.output
        if id(op) in self.edge_scatters:
            x, x_end, w, heads = self.edge_scatters[id(op)]
            F = self.width(out)
            if x_end == "edge":
                kernel, to_dst = "weighted_edge_scatter", op.attrs.get("end", "dst") == "dst"
            else:
                kernel, to_dst = "weighted_gather_scatter", x_end == "src"
            w_ptr = self.weights(self.producer[op.inputs[0].id], w)
            stored = f", &{self._stored_plan(x)}" if x.id in self.stored_rows else ""
            return self.timed("edges", f"mg::op::{kernel}(m.g, {'true' if to_dst else 'false'}, "
                              f"{self.ptr(x)}, {w_ptr}, {heads}, ({F}) / {heads}, {self.ptr(out)}{stored})",
                              f"(4.0 * m.graph.num_edges * ({F} + {heads} + 2) + 4.0 * {self.numel(out)})",
                              f"2.0 * m.graph.num_edges * {F}")
        reduce = op.attrs["reduce"]
        arg = self.argmax_for(out) if reduce == "max" else "nullptr"
        to_dst = "true" if op.attrs.get("end", "dst") == "dst" else "false"
        return self.timed("edges", f"mg::op::scatter(m.g, {to_dst}, {_REDUCE[reduce]}, {self.ptr(msg)}, "
                          f"{self.width(msg)}, {self.ptr(out)}, {arg})", f"4.0 * ({self.numel(msg)} + {self.numel(out)})")

    def op_scatter_max_grad(self, op, g, msg, y):
        to_dst = "true" if op.attrs.get("end", "dst") == "dst" else "false"
        return self.timed("edges", f"mg::op::scatter_max_grad(m.g, {to_dst}, {self.ptr(g)}, {self.width(g)}, "
                          f"{self.argmax_for(y)}, {self.ptr(op.output)})", f"4.0 * {self.numel(op.output)}")

    def _agg_spec(self, op) -> str:
        a = op.attrs
        weights, scale = aggregate_weights(op), aggregate_scale(op)
        w = self.ptr(weights) if weights is not None else "nullptr"
        norm = {"none": "mg::op::kNormNone", "gcn": "mg::op::kNormGcn",
                "gcn_weighted": "mg::op::kNormGcnWeighted", "node_scale": "mg::op::kNormNodeScale"}[a.get("norm", "none")]
        if a.get("norm") == "gcn_weighted":
            self.require("weighted_gcn_scale")
        tail = f", {self.ptr(scale)}" if scale is not None else ""
        return (f"mg::op::agg_spec(m.g, {_REDUCE[a['reduce']]}, {w}, {norm}, "
                f"{'true' if a.get('self_loops') else 'false'}{tail})")

    def _agg_cost(self, x: Value) -> tuple:
        F = self.width(x)
        bytes_ = f"(4.0 * m.graph.num_edges * ({F} + 2) + 4.0 * m.graph.num_nodes * (2.0 * {F} + 4))"
        return bytes_, f"2.0 * m.graph.num_edges * {F}"

    def aggregate_args(self, op, x: Value) -> str:
        """The arguments of a forward aggregation over in-edges: graph, spec, input, width,
        output, argmax (max only), then the fused bias/activation tail when there is one."""
        arg = self.argmax_for(op.output) if op.attrs["reduce"] == "max" else "nullptr"
        epilogue, out = self._epilogue(op)
        return f"m.g, {self._agg_spec(op)}, {self.ptr(x)}, {self.width(x)}, {self.ptr(out)}, {arg}{epilogue}"

    def op_aggregate(self, op, x, *weights):
        out = op.output
        if self._identity_rows(x) is not None:
            raise self._featureless_read()      # an aggregation of identity rows is N wide
        bytes_, flops = self._agg_cost(x)
        tile = self.spmm_tile(x)
        if op.attrs.get("direction", "in") == "in":
            if self._head_on_logit_rows(op):
                share = f"(double({self.visited_rows('m.logit_rows', self.rows(out))}) / {self.rows(out)})"
                return self.timed("aggregate", f"mg::op::aggregate_masked_rows{tile}({self.logit_rows()}, "
                                  f"{self.aggregate_args(op, x)})", f"{share} * {bytes_}", f"{share} * {flops}",
                                  kernel="mg::op::aggregate_masked_rows")
            return self.timed("aggregate", f"mg::op::aggregate{tile}({self.aggregate_args(op, x)})", bytes_, flops,
                              kernel="mg::op::aggregate")
        return self.timed("aggregate_backward", f"mg::op::aggregate_transpose{tile}(m.g, {self._agg_spec(op)}, "
                          f"{self.ptr(x)}, {self.width(x)}, {self.ptr(out)})", bytes_, flops,
                          kernel="mg::op::aggregate_transpose")

    def spmm_tile(self, x: Value) -> str:
        """The template argument that widens spmm.h's feature tile for rows known to be wider
        than 32 (`spmm_tile_for`: the width in whole vectors up to 64 floats): each neighbour list
        is walked once per row instead of twice (SAGE's 64-wide aggregations on the arxiv-shaped
        graph: 6% faster forward, 14% transposed; its 40-wide ones, AVX2: 10.0 -> 7.5 ms against a
        64-float tile).  Only where the width is known here, and rows of 32 or fewer keep the
        default tile: wider tiles over 32-wide rows were slower (GCN's, by a third).  The tiles
        this can name are instantiated once, in the op layer (ops.cpp)."""
        width = x.shape[-1] if x.shape else 1
        if self.spmm_tile_by_width and isinstance(width, int) and width > 32:
            return f"<mg::spmm_tile_for({width})>"
        return ""

    def op_aggregate_max_grad(self, op, g, x, y):
        fwd = self.producer[y.id]
        bytes_, flops = self._agg_cost(g)
        return self.timed("aggregate_backward", f"mg::op::aggregate_max_grad(m.g, {self._agg_spec(fwd)}, "
                          f"{self.argmax_for(y)}, {self.ptr(g)}, {self.width(g)}, {self.ptr(op.output)})", bytes_, flops)

    def _bcast(self, v: Value, out: Value) -> str:
        if v.assoc == "scalar" or (v.assoc == "param" and v.width == 1 and out.assoc != "param"):
            return "mg::Bcast::Scalar"     # a scalar weight scales every element
        if v.assoc == "param" and out.assoc != "param":
            return "mg::Bcast::Row"
        if v.shape and v.shape[-1] == 1 and out.shape and out.shape[-1] != 1:
            return "mg::Bcast::Col"
        return "mg::Bcast::Full"

    def _binary(self, op, a, b, binop: str = ""):
        if id(op) in self.head_products:
            return self._head_mul_add(op)
        if id(op) in self.scaled_operands:
            return self._scaled_add(op)
        if id(op) in self.weighted_gathers:
            return self._weighted_gather(op)
        out = op.output
        epilogue, final = self._epilogue(op)     # a fused bias/activation tail writes the chain's value
        return self.timed("elementwise", f"mg::binary_fwd({binop or _BINOP[op.opcode]}, {self.ptr(a)}, "
                          f"{self._bcast(a, out)}, {self.ptr(b)}, {self._bcast(b, out)}, {self.ptr(final)}, {self.rows(out)}, "
                          f"{self.width(out)}{epilogue})", f"12.0 * {self.numel(out)}", f"1.0 * {self.numel(out)}")

    op_add = op_sub = op_mul = op_div = _binary

    def _scaled_add(self, op):
        """add | sub(scale(x, c), ...) in one pass (plan_scaled_operands)."""
        (ca, a), (cb, b) = self.scaled_operands[id(op)]
        out = op.output
        epilogue, final = self._epilogue(op)
        return self.timed("elementwise", f"mg::scaled_add({_float(ca)}f, {self.ptr(a)}, {_float(cb)}f, {self.ptr(b)}, "
                          f"{self.ptr(final)}, {self.rows(out)}, {self.width(out)}{epilogue})",
                          f"12.0 * {self.numel(out)}", f"3.0 * {self.numel(out)}")

    def _head_mul_add(self, op):
        """add(base, head_mul(x, s)) in one pass (plan_head_products)."""
        prod = self.head_products[id(op)]
        x, s = prod.inputs
        base = next(v for v in op.inputs if v is not prod.output)
        heads = prod.attrs["heads"]
        is_row = "true" if x.assoc == "param" else "false"
        return self.timed("elementwise", f"mg::head_mul_add({self.ptr(base)}, {self.ptr(x)}, {is_row}, {self.ptr(s)}, "
                          f"{self.ptr(op.output)}, {self.rows(op.output)}, {heads}, {self.head_dim(x, heads)})",
                          f"12.0 * {self.numel(op.output)}")

    def _unary(self, op, x):
        alpha = _float(op.attrs.get("alpha", _ACT_DEFAULT_ALPHA.get(op.opcode, 0.0)))
        call = _ACT_FWD[op.opcode].format(x=self.ptr(x), y=self.ptr(op.output), n=self.numel(op.output), alpha=alpha)
        return self.timed("elementwise", call, f"8.0 * {self.numel(op.output)}")

    op_relu = op_leaky_relu = op_elu = op_exp = op_sigmoid = op_tanh = op_neg = _unary

    def dropout_act_grad_call(self, kind: str, alpha: str, drop, y: Value, out: Value) -> str:
        """The backward of `activation -> dropout` in one pass (plan_dropout_act_grads); the mask
        is the dropout's, keyed by the element's position in the value."""
        g = drop.inputs[0]
        return (f"mg::op::dropout_act_grad(mg::op::ActKind::{kind}, {alpha}f, {self.ptr(g)}, {self.ptr(y)}, "
                f"{self.numel(g)}, {_float(drop.attrs['p'])}f, m.seed, uint64_t(m.epoch), {int(drop.attrs['site'])}u, "
                f"{self.ptr(out)})")

    def op_act_grad(self, op, g, y):
        act = op.attrs["act"]
        alpha = _float(op.attrs.get("alpha", _ACT_DEFAULT_ALPHA.get(act, 0.0)))
        drop = self.fused_dropout_grad.get(op.output.id)
        if drop is not None:
            return self.timed("elementwise", self.dropout_act_grad_call(_ACT_KIND[act], alpha, drop, y, op.output),
                              f"12.0 * {self.numel(drop.inputs[0])}")
        return self.timed("elementwise", f"mg::op::act_grad(mg::op::ActKind::{_ACT_KIND[act]}, {alpha}f, {self.ptr(g)}, "
                          f"{self.ptr(y)}, {self.numel(g)}, {self.ptr(op.output)})", f"12.0 * {self.numel(g)}")

    def _math(self, op, x):
        fn, c = _MATH_FN[op.opcode], _float(op.attrs.get("c", 0.0))
        return self.timed("elementwise", f"mg::math_fwd(mg::MathFn::{fn}, {c}f, {self.ptr(x)}, {self.ptr(op.output)}, "
                          f"{self.numel(op.output)})", f"8.0 * {self.numel(op.output)}")

    op_sqrt = op_rsqrt = op_log = op_abs = op_pow = op_gelu = op_softplus = op_shift = _math

    def op_math_grad(self, op, g, x):
        fn, c = _MATH_FN[op.attrs["fn"]], _float(op.attrs.get("c", 0.0))
        return self.timed("elementwise", f"mg::math_bwd(mg::MathFn::{fn}, {c}f, {self.ptr(g)}, {self.ptr(x)}, "
                          f"{self.ptr(op.output)}, {self.numel(g)})", f"12.0 * {self.numel(g)}")

    def _row_softmax(self, op, x):
        log = "true" if op.opcode == "log_softmax" else "false"
        return self.timed("elementwise", f"mg::row_softmax_fwd({self.ptr(x)}, {self.ptr(op.output)}, {self.rows(x)}, "
                          f"{self.width(x)}, {log})", f"8.0 * {self.numel(x)}")

    op_softmax = op_log_softmax = _row_softmax

    def op_softmax_grad(self, op, g, y):
        log = "true" if op.attrs["log"] else "false"
        return self.timed("elementwise", f"mg::row_softmax_bwd({self.ptr(y)}, {self.ptr(g)}, {self.ptr(op.output)}, "
                          f"{self.rows(g)}, {self.width(g)}, {log})", f"12.0 * {self.numel(g)}")

    def op_scale(self, op, x):
        return self.timed("elementwise", f"mg::scale({self.ptr(x)}, {self.ptr(op.output)}, {self.numel(x)}, "
                          f"{_float(op.attrs['c'])}f)", f"8.0 * {self.numel(x)}")

    def op_bias_add(self, op, x, b):
        out = op.output
        if id(op) in self.epilogues:                # an activation runs in the same pass
            return self._binary(op, x, b, binop="mg::BinOp::Add")
        return self.timed("elementwise", f"mg::bias_add({self.ptr(x)}, {self.ptr(b)}, {self.ptr(out)}, {self.rows(out)}, "
                          f"{self.width(out)})", f"8.0 * {self.numel(out)}")

    def op_row_sum(self, op, g):
        prod = self.head_products.get(id(op))
        if prod is not None:          # row_sum(head_mul(x, s)) in one pass (plan_head_products)
            x, s = prod.inputs
            heads = prod.attrs["heads"]
            return self.timed("elementwise", f"mg::head_mul_row_sum({self.ptr(x)}, {self.ptr(s)}, {self.ptr(op.output)}, "
                              f"{self.rows(g)}, {heads}, {self.head_dim(x, heads)})",
                              f"4.0 * ({self.numel(g)} + {self.numel(s)})")
        if self.reduces_over_train_rows(op):
            return self.timed("elementwise", f"mg::op::row_sum_train_rows({self.train_rows_plan()}, {self.ptr(g)}, "
                              f"{self.rows(g)}, {self.width(g)}, {self.ptr(op.output)})",
                              f"4.0 * {self.visited_rows('&m.train_rows', self.rows(g))} * {self.width(g)}")
        return self.timed("elementwise", f"mg::row_sum({self.ptr(g)}, {self.ptr(op.output)}, {self.rows(g)}, "
                          f"{self.width(g)})", f"4.0 * {self.numel(g)}")

    def op_feature_sum(self, op, g):
        if id(op) in self.edge_dots:
            return self._edge_dot(op)
        return self.timed("elementwise", f"mg::op::feature_sum({self.ptr(g)}, {self.rows(g)}, {self.width(g)}, "
                          f"{self.ptr(op.output)})", f"4.0 * {self.numel(g)}")

    def _edge_dot(self, op) -> str:
        """A dot of two gathered node values, read at their edge ends (plan_edge_traversals)."""
        a, a_end, b, b_end, heads = self.edge_dots[id(op)]
        F = self.width(a)
        if b.id in self.stored_rows and b_end == "edge":
            a, a_end, b, b_end = b, b_end, a, a_end        # a dot is symmetric: the stored rows first
        if a.id in self.stored_rows and a_end == "edge":
            return self.timed("edges", f"mg::op::edge_dot_stored(m.g, {self._stored_plan(a)}, {self.ptr(a)}, "
                              f"{self.ptr(b)}, {heads}, ({F}) / {heads}, {self.ptr(op.output)})",
                              f"(8.0 * m.graph.num_edges * ({F} + 1))", f"2.0 * m.graph.num_edges * {F}")
        return self.timed("edges", f"mg::op::edge_dot(m.g, {self.ptr(a)}, {self.row_at(a_end)}, "
                          f"{self.ptr(b)}, {self.row_at(b_end)}, {heads}, ({F}) / {heads}, "
                          f"{self.ptr(op.output)})", f"(8.0 * m.graph.num_edges * ({F} + 1))",
                          f"2.0 * m.graph.num_edges * {F}")

    def op_dot(self, op, a, b):
        if id(op) in self.edge_dots:
            return self._edge_dot(op)
        is_row = "true" if b.assoc == "param" and a.assoc != "param" else "false"
        heads = op.attrs.get("heads", 1)
        return self.timed("elementwise", f"mg::rowwise_dot_fwd({self.ptr(a)}, {self.ptr(b)}, {is_row}, "
                          f"{self.ptr(op.output)}, {self.rows(a)}, {heads}, {self.head_dim(a, heads)})",
                          f"8.0 * {self.numel(a)}")

    # -- normalisation layers (kernels/norm.h) ---------------------------------------------------
    def op_layer_standardize(self, op, x):
        return self.timed("elementwise", f"mg::layer_standardize_fwd({self.ptr(x)}, {self.rows(op.output)}, "
                          f"{self.width(x)}, {_float(op.attrs['eps'])}f, {self.ptr(op.output)})",
                          f"8.0 * {self.numel(op.output)}")

    def op_layer_standardize_grad(self, op, g, x, y):
        return self.timed("elementwise", f"mg::layer_standardize_bwd({self.ptr(g)}, {self.ptr(x)}, {self.ptr(y)}, "
                          f"{self.rows(op.output)}, {self.width(g)}, {_float(op.attrs['eps'])}f, "
                          f"{self.ptr(op.output)})", f"16.0 * {self.numel(op.output)}")

    def op_batch_standardize(self, op, x, mean, var):
        if id(op) in self.batch_norm_affine:
            scale, gamma = self.batch_norm_affine[id(op)]
            epilogue, final = self._epilogue_struct(scale)
            y = "nullptr" if op.output.id in self.unwritten else self.ptr(op.output)
            keep = f", &m.{self.batch_statistics[id(op)]}" if id(op) in self.batch_statistics else ""
            return self.timed("elementwise", f"mg::batch_norm_affine_fwd(training, {self.ptr(x)}, {self.rows(op.output)}, "
                              f"{self.all_rows(op.output)}, {self.width(x)}, {self.ptr(mean)}, {self.ptr(var)}, "
                              f"{_float(op.attrs['eps'])}f, {_float(op.attrs['momentum'])}f, {self.ptr(gamma)}, "
                              f"{epilogue or 'mg::Epilogue{}'}, {y}, "
                              f"{self.ptr(final)}, {self.across_ranks()}{keep})", f"12.0 * {self.numel(op.output)}")
        return self.timed("elementwise", f"mg::batch_standardize_fwd(training, {self.ptr(x)}, {self.rows(op.output)}, "
                          f"{self.all_rows(op.output)}, {self.width(x)}, {self.ptr(mean)}, {self.ptr(var)}, "
                          f"{_float(op.attrs['eps'])}f, {_float(op.attrs['momentum'])}f, {self.ptr(op.output)}, "
                          f"{self.across_ranks()})", f"16.0 * {self.numel(op.output)}")

    def op_batch_standardize_grad(self, op, g, x, y):
        if id(op) in self.batch_norm_grads:
            a, gamma, dgamma, dbeta, relu_beta = self.batch_norm_grads[id(op)]
            y_rows = "nullptr" if y.id in self.unwritten else self.ptr(y)     # recomputed from x
            kept = id(op) in self.batch_statistics
            # The kernel's optional trailing arguments: the relu's beta, then the kept statistics.
            optional = []
            if relu_beta is not None or kept:
                optional.append(self.ptr(relu_beta) if relu_beta is not None else "nullptr")
            if kept:
                optional.append(f"&m.{self.batch_statistics[id(op)]}")
            # Arrays of node rows moved: x for the moments (unless kept), a and x (or y) for the
            # sums, a and x (or y) read and dx written for dx.
            arrays = 5 if kept else 6
            return self.timed("elementwise", f"mg::batch_norm_affine_bwd({self.ptr(a)}, {self.ptr(gamma)}, "
                              f"{self.ptr(x)}, {y_rows}, {self.rows(op.output)}, {self.all_rows(op.output)}, "
                              f"{self.width(g)}, {_float(op.attrs['eps'])}f, {self.ptr(op.output)}, "
                              f"{self.ptr(dgamma) if dgamma is not None else 'nullptr'}, "
                              f"{self.ptr(dbeta) if dbeta is not None else 'nullptr'}, {self.across_ranks()}"
                              f"{''.join(', ' + arg for arg in optional)})", f"{4.0 * arrays} * {self.numel(op.output)}")
        return self.timed("elementwise", f"mg::batch_standardize_bwd({self.ptr(g)}, {self.ptr(x)}, {self.ptr(y)}, "
                          f"{self.rows(op.output)}, {self.all_rows(op.output)}, {self.width(g)}, "
                          f"{_float(op.attrs['eps'])}f, {self.ptr(op.output)}, {self.across_ranks()})",
                          f"24.0 * {self.numel(op.output)}")

    def all_rows(self, v: Value) -> str:
        """The rows of ``v`` in the whole graph (more than ``rows(v)`` where the graph is split)."""
        return self.rows(v)

    def across_ranks(self) -> str:
        """What adds per-feature statistics over the processes holding parts of the rows."""
        return "mg::LocalRows{}"

    # R-GCN's basis decomposition, W (T x KM) = A (T x B) . V (B x KM): dense products on the weights
    def op_basis_combine(self, op, a, v):
        return self._basis_product("linear", a, self.dim(a.shape[0]), self.width(a), v, op.output)

    def op_basis_coef_grad(self, op, g, v):        # dA = dW . V^T
        return self._basis_product("matmul_nt", g, self.dim(g.shape[0]), self.dim(v.shape[0]), v, op.output)

    def op_basis_grad(self, op, a, g):             # dV = A^T . dW
        return self._basis_product("matmul_tn", a, self.dim(a.shape[0]), self.width(a), g, op.output)

    def _basis_product(self, kernel: str, left: Value, T: str, B: str, right: Value, out: Value) -> str:
        """One of the three (T x B) . (B x KM) products of a basis combination, every matrix row-major
        and KM = K * M (one basis, or one type's matrix, as a row).  ``kernel`` takes its arguments
        in the order (left, T, inner, right, outer, out) as mg::op::linear / matmul_nt / matmul_tn do."""
        KM = f"({self.dim(right.shape[1])}) * ({self.dim(right.shape[2])})"
        inner, outer = (KM, B) if kernel == "matmul_nt" else (B, KM)
        return self.timed("gemm", f"mg::op::{kernel}({self.ptr(left)}, {T}, {inner}, {self.ptr(right)}, {outer}, "
                          f"{self.ptr(out)})", f"4.0 * ({T} * {B} + ({B} + {T}) * {KM})", f"2.0 * {T} * {B} * {KM}")

    def head_dim(self, v: Value, heads: int) -> str:
        return f"({self.width(v)}) / {heads}"

    def _weighted_gather(self, op):
        """head_mul(gather(x), w), or x's gathered rows times or over an edge weight, in one pass
        (plan_edge_traversals)."""
        x, end, w = self.weighted_gathers[id(op)]
        heads = op.attrs.get("heads", 1)
        return self.timed("edges", f"mg::op::weighted_gather(m.g, {self.row_at(end)}, {self.ptr(x)}, "
                          f"{self.weights(op, w)}, {heads}, {self.head_dim(x, heads)}, {self.ptr(op.output)})",
                          f"4.0 * m.graph.num_edges * (2.0 * {self.width(x)} + {heads})")

    def op_head_mul(self, op, x, s):
        heads = op.attrs["heads"]
        if id(op) in self.weighted_gathers:
            return self._weighted_gather(op)
        is_row = "true" if x.assoc == "param" else "false"
        return self.timed("elementwise", f"mg::head_mul({self.ptr(x)}, {is_row}, {self.ptr(s)}, {self.ptr(op.output)}, "
                          f"{self.rows(s)}, {heads}, {self.head_dim(x, heads)})", f"12.0 * {self.numel(op.output)}")

    def op_head_mean(self, op, x):
        heads = op.attrs["heads"]
        return self.timed("elementwise", f"mg::head_sum({self.ptr(x)}, {_float(1.0 / heads)}, {self.ptr(op.output)}, "
                          f"{self.rows(x)}, {heads}, {self.head_dim(x, heads)})", f"4.0 * {self.numel(x)}")

    def op_head_repeat(self, op, g):
        heads = op.attrs["heads"]
        return self.timed("elementwise", f"mg::head_repeat({self.ptr(g)}, {_float(op.attrs.get('c', 1.0))}, "
                          f"{self.ptr(op.output)}, {self.rows(g)}, {heads}, {self.width(g)})",
                          f"4.0 * {self.numel(op.output)}")

    def op_edge_softmax(self, op, s):
        if id(op) in self.edge_attention:
            a, b, act, keep_scores = self.edge_attention[id(op)]
            scores = self.ptr(s) if keep_scores else "nullptr"
            return self.timed("edges", f"mg::edge_attention_fwd({self.ptr(a)}, {self.ptr(b)}, m.graph.indptr, "
                              f"m.graph.col, m.graph.num_nodes, {self.width(s)}, "
                              f"{_float(act.attrs.get('alpha', _ACT_DEFAULT_ALPHA['leaky_relu']))}f, {scores}, "
                              f"{self.ptr(op.output)}{self.softmax_edges_arg()})",
                              f"4.0 * m.graph.num_edges * (2 + {self.width(s)} * {2 if keep_scores else 1})",
                              f"8.0 * {self.numel(s)}")
        return self.timed("edges", f"mg::edge_softmax_fwd({self.ptr(s)}, m.graph.indptr, m.graph.num_nodes, "
                          f"{self.width(s)}, {self.ptr(op.output)}{self.softmax_edges_arg()})",
                          f"8.0 * {self.numel(s)}")

    def softmax_edges_arg(self) -> str:
        """A last argument of the edge softmax calls: none here; the CUDA kernels size their lane
        groups by the graph's average in-degree and take its edge count."""
        return ""

    def op_edge_softmax_grad(self, op, g, y):
        if id(op) in self.softmax_grads:
            drop, act, scatter = self.softmax_grads[id(op)]
            de = (act or op).output
            if drop is not None:
                g = drop.inputs[0]
                p = _float(drop.attrs["p"])
                key = f"mg::DropoutKey{{m.seed, uint64_t(m.epoch), {int(drop.attrs['site'])}u}}"
            else:
                p, key = "0.0", "mg::DropoutKey{0, 0, 0}"
            s = self.ptr(act.inputs[1]) if act is not None else "nullptr"
            slope = _float(act.attrs.get("alpha", _ACT_DEFAULT_ALPHA["leaky_relu"])) if act is not None else "1.0"
            sums = self.ptr(scatter.output) if scatter is not None else "nullptr"
            arrays = 3 + (act is not None)
            return self.timed("edges", f"mg::edge_softmax_act_bwd({self.ptr(g)}, {p}f, {key}, {self.edge_ids()}, "
                              f"{self.ptr(y)}, {s}, {slope}f, m.graph.indptr, m.graph.num_nodes, {self.width(g)}, "
                              f"{self.ptr(de)}, {sums}{self.softmax_edges_arg()})",
                              f"4.0 * {self.numel(g)} * {arrays}", f"8.0 * {self.numel(g)}")
        return self.timed("edges", f"mg::edge_softmax_bwd({self.ptr(y)}, {self.ptr(g)}, m.graph.indptr, "
                          f"m.graph.num_nodes, {self.width(g)}, {self.ptr(op.output)}{self.softmax_edges_arg()})",
                          f"12.0 * {self.numel(g)}")

    def op_concat(self, op, *parts):
        out = op.output
        ptrs = ", ".join(self.ptr(v) for v in parts)
        widths = ", ".join(f"int64_t({self.width(v)})" for v in parts)
        return self.timed("elementwise", f"const float *parts_[] = {{{ptrs}}}; const int64_t widths_[] = {{{widths}}}; "
                          f"mg::concat_fwd(parts_, widths_, {len(parts)}, {self.ptr(out)}, {self.rows(out)})",
                          f"8.0 * {self.numel(out)}", kernel="mg::concat_fwd")

    def op_slice(self, op, g):
        a = op.attrs
        return self.timed("elementwise", f"mg::op::slice({self.ptr(g)}, {self.rows(g)}, {self.width(g)}, "
                          f"{self.dim(a['start'])}, {self.dim(a['stop'])}, {self.ptr(op.output)})",
                          f"8.0 * {self.numel(op.output)}")

    def op_param_slice(self, op, w):
        a = op.attrs
        self.views[op.output.id] = f"({self.ptr(w)} + ({self.dim(a['start'])}) * ({self.width(w)}))"
        return None

    def op_row_concat(self, op, *parts):
        ptrs = ", ".join(self.ptr(v) for v in parts)
        rows = ", ".join(f"mg::idx_t({self.rows(v)})" for v in parts)
        return self.timed("elementwise", f"const float *parts_[] = {{{ptrs}}}; const mg::idx_t rows_[] = {{{rows}}}; "
                          f"mg::op::row_concat(parts_, rows_, {len(parts)}, {self.width(op.output)}, "
                          f"{self.ptr(op.output)})", kernel="mg::op::row_concat")

    def _typed_shape(self, w: Value):
        if len(w.shape) == 3:
            return self.dim(w.shape[0]), self.dim(w.shape[1]), self.dim(w.shape[2])
        return "1", self.dim(w.shape[0]), self.dim(w.shape[1])

    def op_matvec(self, op, w, a):
        T, K, M = self._typed_shape(w)
        return self.timed("elementwise", f"mg::op::matvec({self.ptr(w)}, {self.ptr(a)}, {T}, {K}, {M}, {self.ptr(op.output)})")

    def op_matvec_t(self, op, w, g):
        T, K, M = self._typed_shape(w)
        return self.timed("elementwise", f"mg::op::matvec_t({self.ptr(w)}, {self.ptr(g)}, {T}, {K}, {M}, {self.ptr(op.output)})")

    def op_outer(self, op, g, a):
        T, K, M = self._typed_shape(op.output)
        return self.timed("elementwise", f"mg::op::outer({self.ptr(g)}, {self.ptr(a)}, {T}, {K}, {M}, {self.ptr(op.output)})")

    def op_dropout(self, op, x):
        if op.output.id in self.feature_like:       # planned by plan_feature_views
            return self._dropout_features(op, x)
        n = self.numel(x)
        return self.timed("dropout", f"mg::op::dropout(training, {self.ptr(x)}, {self.ptr(op.output)}, {n}, "
                          f"{_float(op.attrs['p'])}f, m.seed, uint64_t(m.epoch), {op.output.id}u)", f"8.0 * {n}")

    def _dropout_features(self, op, x):
        out = op.output
        view, values = f"fv{out.id}", f"fvalues{out.id}"      # the names plan_feature_views gave
        self.members.append(f"mg::FeatureView {view}; mg::Buffer {values};")
        self.prepare.append(f"m.{values}.allocate(mg::op::dropped_feature_buffer(m.features), m.allocated_bytes)")
        return self.timed("dropout", f"mg::op::dropout_features(training, {self.feature_like[x.id]}, m.{view}, "
                          f"m.{values}.data, {_float(op.attrs['p'])}f, m.seed, uint64_t(m.epoch), {out.id}u)",
                          f"8.0 * mg::op::feature_values(m.features)")

    def op_dropout_grad(self, op, g):
        n = self.numel(g)
        return self.timed("dropout", f"mg::op::dropout_grad({self.ptr(g)}, {self.ptr(op.output)}, {n}, "
                          f"{_float(op.attrs['p'])}f, m.seed, uint64_t(m.epoch), {int(op.attrs['site'])}u)", f"8.0 * {n}")

    def op_cross_entropy(self, op, logits, labels):
        if self.train_rows:         # the training mask's rows: visit those alone
            return self.timed("loss", f"mg::op::cross_entropy_train_rows({self.train_rows_plan()}, {self.ptr(logits)}, "
                              f"m.labels, m.masks[0], m.graph.num_nodes, {self.width(logits)}, {self.ptr(op.output)})",
                              f"4.0 * {self.visited_rows('&m.train_rows', self.rows(logits))} * {self.width(logits)}")
        return self.timed("loss", f"mg::op::cross_entropy({self.ptr(logits)}, m.labels, m.masks[0], m.graph.num_nodes, "
                          f"{self.width(logits)}, {self.ptr(op.output)})", f"4.0 * {self.numel(logits)}")

    def op_cross_entropy_grad(self, op, logits, labels):
        if all(self.reduces_over_train_rows(r) for r, _ in self.readers.get(op.output.id, [])):
            return self.timed("loss", f"mg::op::cross_entropy_grad_train_rows({self.train_rows_plan()}, "
                              f"{self.ptr(logits)}, m.labels, m.masks[0], m.graph.num_nodes, {self.width(logits)}, "
                              f"{self.ptr(op.output)})", f"8.0 * {self.visited_rows('&m.train_rows', self.rows(logits))} * "
                              f"{self.width(logits)}")
        return self.timed("loss", f"mg::op::cross_entropy_grad({self.ptr(logits)}, m.labels, m.masks[0], "
                          f"m.graph.num_nodes, {self.width(logits)}, {self.ptr(op.output)})",
                          f"8.0 * {self.numel(logits)}")

    def reduces_over_train_rows(self, op) -> bool:
        """Whether ``op`` (a weight or bias gradient) runs the train-rows kernel, reading its
        gradient on the training rows alone when they are few: the one rule op_matmul_tn,
        op_row_sum and the cross entropy's gradient follow."""
        if op.opcode == "matmul_tn":
            x, g = op.inputs
            return g.id in self.train_rows and x.id not in self.feature_like and self._identity_rows(x) is None
        return op.opcode == "row_sum" and op.inputs[0].id in self.train_rows and id(op) not in self.head_products

    def _link_args(self, op, z, rel) -> tuple:
        return (f"{self.ptr(z)}", f"{self.ptr(rel)}", f"{self.dim(rel.shape[0])}", self.width(z),
                f"{_float(op.attrs.get('regularization', 0.0))}f")

    def link_kernel(self, name: str) -> str:
        """A link-loss kernel's call up to its first argument (the MPI backend's kernels take the
        partition first: they score the rank's share of the triples on the whole graph's rows)."""
        return f"mg::op::{name}("

    def op_link_loss(self, op, z, rel):
        zp, rp, types, h, reg = self._link_args(op, z, rel)
        return self.timed("loss", f"{self.link_kernel('link_loss')}{zp}, m.graph.num_nodes, {rp}, {types}, {h}, "
                          f"m.triples, m.num_triples, {reg}, {self.ptr(op.output)})", f"4.0 * m.num_triples * {h}")

    def op_link_loss_grad(self, op, z, rel):
        zp, rp, _, h, reg = self._link_args(op, z, rel)
        return self.timed("loss", f"{self.link_kernel('link_loss_grad')}{zp}, m.graph.num_nodes, {rp}, {h}, "
                          f"m.triples, m.num_triples, {reg}, {self.ptr(op.output)})", f"8.0 * m.num_triples * {h}")

    def op_link_loss_rel_grad(self, op, z, rel):
        zp, rp, types, h, reg = self._link_args(op, z, rel)
        return self.timed("loss", f"{self.link_kernel('link_loss_rel_grad')}{zp}, {rp}, {types}, {h}, m.triples, "
                          f"m.num_triples, {reg}, {self.ptr(op.output)})", f"6.0 * m.num_triples * {h}")


def emit(program: Program) -> dict:
    """Generated C++ sources of `program` (backward already generated) for the OpenMP backend."""
    if not program.backward and not program.grads:
        raise InternalError("emit() needs a differentiated program (call morphgen.autodiff.differentiate)")
    return OpenMPEmitter(program).emit()
