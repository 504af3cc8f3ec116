/* The sender's steady state in C: a cumulative ACK taken (sender.on_cum_ack with cc.DctcpWindow.on_ack) and the
 * next burst of new packets chosen (sender.Sender.pick_burst's common branch: sends in progress to one peer, none
 * with a retransmission queued), for ``_rxlane.rx_wait``, which runs them without the Python loop, and for the
 * Python loop's own cumulative ACKs and picks.
 *
 * Why: on a ring the ACKs for a rank's own sends come about one per data packet, and each cost the Python loop a
 * wake-up, a dozen numpy slice operations, the window's update and a pick (~100 us of a CPU); rx_wait handled the
 * receiver's packets natively but returned to Python for every one of them.
 *
 * How: the state stays in the Python objects (PeerState, OutTransfer, DctcpWindow and its CCParams): the functions
 * here read the fields they need, run the same arithmetic in the same order (IEEE doubles, no contraction:
 * setup.py compiles with -ffp-contract=off), and write back what changed, all with the GIL and the endpoint's lock
 * held. Nothing is cached between calls, so the Python path and this one may take turns on one transfer at any
 * point. tests/host/test_txstep.py holds them equal to the Python functions field by field, on random states and
 * event sequences. */

#include <math.h>

/* ---- attribute access ---------------------------------------------------------------------------------------- */

enum {
    /* DctcpWindow */
    A_CWND, A_SSTHRESH, A_ALPHA, A_SRTT, A_ACK_DELAY, A_RATE, A_WIN_START, A_RATE_BYTES, A_RTTVAR, A_MIN_RTT, A_RTO,
    A_BACKOFF, A_WIN_ACKED, A_WIN_MARKED, A_WIN_TARGET, A_WIN_MIN_Q, A_WIN_SAMPLES, A_CWR, A_CWR_ACKED, A_CWR_MARKED,
    A_MARKS_SEEN, A_ECN_MARKS, A_DELAY_MARKS, A_CUTS, A_FAST_CUTS, A_HYSTART_EXITS, A_SPURIOUS, A_RTO_SEED, A_UNDO,
    A_P,
    /* CCParams */
    A_MSS, A_MIN_CWND_PKTS, A_MAX_CWND_BYTES, A_G, A_DELAY_TARGET, A_HYSTART_DELAY, A_PROBE_DELAY, A_CSS_GROWTH,
    A_RTO_MIN, A_RTO_MAX, A_RTO_INIT, A_GAIN_SS, A_GAIN_CA, A_MIN_RTT_FLOOR, A_ACK_DELAY_COMP, A_MAX_ACK_STRETCH,
    A_FAST_ALPHA, A_FAST_GAMMA,
    /* PeerState */
    A_CC, A_INFLIGHT, A_PROGRESS, A_RTO_AT, A_RTO_FIRED, A_OWD_BASE, A_OWD_MIN, A_NEXT_SEND, A_ACTIVE, A_OUT,
    A_LAST_FEEDBACK,
    /* OutTransfer */
    A_ACKED, A_SENT_ORDER, A_SENT_TIME, A_RETX, A_PLAN, A_LENGTHS, A_CUML, A_CUM_ACKED, A_ACKED_HI, A_PROBES,
    A_NEXT_SEQ, A_READY, A_ORDER, A_N_ELIG, A_PKTS_SENT, A_LAST_SENT, A_SENDING, A_RETXQ, A_ACKS, A_ECN_ECHOES,
    A_TOTAL, A_QUEUED, A_ELIGIBLE, A_COPIES,
    /* OutTransfer's send buffers */
    A_HDR, A_PAYLOAD, A_OFFS, A_LENS, A_TOS,
    /* Sender, Transmitter */
    A_N_ACTIVE, A_SEND_BUF, A_RR, A_SLICED, A_PEERS, A_FULL, A_GSO,
    NATTRS
};
static const char *const ATTR_NAMES[NATTRS] = {
    "cwnd", "ssthresh", "alpha", "srtt", "ack_delay", "rate", "_win_start", "_rate_bytes", "rttvar", "min_rtt", "rto",
    "backoff", "_win_acked", "_win_marked", "_win_target", "_win_min_q", "_win_samples", "_cwr", "_cwr_acked",
    "_cwr_marked", "marks_seen", "ecn_marks", "delay_marks", "cuts", "fast_cuts", "hystart_exits",
    "spurious_timeouts", "rto_seed", "_undo", "p",
    "mss", "min_cwnd_pkts", "max_cwnd_bytes", "g", "delay_target", "hystart_delay", "probe_delay", "css_growth",
    "rto_min", "rto_max", "rto_init", "pacing_gain_ss", "pacing_gain_ca", "min_rtt_floor", "ack_delay_comp",
    "max_ack_stretch", "fast_alpha", "fast_gamma",
    "cc", "inflight", "progress", "rto_at", "rto_fired", "owd_base", "owd_min", "next_send", "active", "out",
    "last_feedback",
    "acked", "sent_order", "sent_time", "retx", "plan", "lengths", "cuml", "cum_acked", "acked_hi", "probes",
    "next_seq", "ready", "order", "n_elig", "pkts_sent", "last_sent", "sending", "retxq", "acks", "ecn_echoes",
    "total", "queued", "eligible", "copies",
    "hdr", "payload", "offs", "lens", "tos",
    "n_active", "_send_buf", "_rr", "sliced", "peers", "full", "gso",
};
static PyObject *ATTR[NATTRS];

static int txstep_init(void)
{
    for (int i = 0; i < NATTRS; i++)
        if ((ATTR[i] = PyUnicode_InternFromString(ATTR_NAMES[i])) == NULL)
            return -1;
    return 0;
}

/* A float (or int) attribute; ``*has`` (when given) 0 for None, which reads as 0.0. -1 with an exception set. */
static int get_d(PyObject *obj, int a, double *out, int *has)
{
    PyObject *v = PyObject_GetAttr(obj, ATTR[a]);
    if (v == NULL)
        return -1;
    if (v == Py_None && has != NULL) {
        *has = 0;
        *out = 0.0;
        Py_DECREF(v);
        return 0;
    }
    double d = PyFloat_AsDouble(v);
    Py_DECREF(v);
    if (d == -1.0 && PyErr_Occurred())
        return -1;
    *out = d;
    if (has != NULL)
        *has = 1;
    return 0;
}

static int get_ll(PyObject *obj, int a, long long *out)
{
    PyObject *v = PyObject_GetAttr(obj, ATTR[a]);
    if (v == NULL)
        return -1;
    long long r = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (r == -1 && PyErr_Occurred())
        return -1;
    *out = r;
    return 0;
}

static int set_obj(PyObject *obj, int a, PyObject *v);

static int add_ll(PyObject *obj, int a, long long n)  /* obj.<a> += n, an int attribute */
{
    long long x;
    if (get_ll(obj, a, &x) < 0)
        return -1;
    return set_obj(obj, a, PyLong_FromLongLong(x + n));
}

static int set_obj(PyObject *obj, int a, PyObject *v)  /* steals v */
{
    if (v == NULL)
        return -1;
    int r = PyObject_SetAttr(obj, ATTR[a], v);
    Py_DECREF(v);
    return r;
}
#define set_d(obj, a, x) set_obj(obj, a, PyFloat_FromDouble(x))
#define set_ll(obj, a, x) set_obj(obj, a, PyLong_FromLongLong(x))
static int set_opt(PyObject *obj, int a, int has, double x)
{
    if (!has) {
        Py_INCREF(Py_None);
        return set_obj(obj, a, Py_None);
    }
    return set_d(obj, a, x);
}

/* Python's min(a, b) and max(a, b): the first argument unless the second is strictly smaller (larger) */
static inline double pmin(double a, double b) { return b < a ? b : a; }
static inline double pmax(double a, double b) { return b > a ? b : a; }

/* ---- the window: cc.DctcpWindow ------------------------------------------------------------------------------ */

typedef struct {
    double mss, min_cwnd, max_cwnd, g, delay_target, hystart_delay, probe_delay, css_growth, rto_min, rto_max,
        rto_init, gain_ss, gain_ca, floor, max_ack_stretch, fast_alpha, fast_gamma;
    long long mss_i, min_cwnd_pkts;
    int has_dt, has_hd, has_pd, has_fa, ack_delay_comp;
} CCP;

typedef struct {
    double cwnd, ssthresh, alpha, srtt, ack_delay, rate, win_start, rate_bytes, rttvar, min_rtt, rto, win_acked,
        win_marked, win_target, win_min_q, cwr, cwr_acked, cwr_marked, rto_seed, undo[4];
    long long backoff, win_samples, marks_seen, ecn_marks, delay_marks, cuts, fast_cuts, hystart_exits, spurious;
    int has_srtt, has_win_start, has_min_rtt, has_rto_seed, has_undo;
    CCP p;
} CC;

static int ccp_load(PyObject *p, CCP *q)
{
    PyObject *v = PyObject_GetAttr(p, ATTR[A_ACK_DELAY_COMP]);
    if (v == NULL)
        return -1;
    q->ack_delay_comp = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (q->ack_delay_comp < 0 || get_ll(p, A_MSS, &q->mss_i) < 0 || get_ll(p, A_MIN_CWND_PKTS, &q->min_cwnd_pkts) < 0
        || get_d(p, A_MAX_CWND_BYTES, &q->max_cwnd, NULL) < 0 || get_d(p, A_G, &q->g, NULL) < 0
        || get_d(p, A_DELAY_TARGET, &q->delay_target, &q->has_dt) < 0
        || get_d(p, A_HYSTART_DELAY, &q->hystart_delay, &q->has_hd) < 0
        || get_d(p, A_PROBE_DELAY, &q->probe_delay, &q->has_pd) < 0
        || get_d(p, A_CSS_GROWTH, &q->css_growth, NULL) < 0 || get_d(p, A_RTO_MIN, &q->rto_min, NULL) < 0
        || get_d(p, A_RTO_MAX, &q->rto_max, NULL) < 0 || get_d(p, A_RTO_INIT, &q->rto_init, NULL) < 0
        || get_d(p, A_GAIN_SS, &q->gain_ss, NULL) < 0 || get_d(p, A_GAIN_CA, &q->gain_ca, NULL) < 0
        || get_d(p, A_MIN_RTT_FLOOR, &q->floor, NULL) < 0 || get_d(p, A_MAX_ACK_STRETCH, &q->max_ack_stretch, NULL) < 0
        || get_d(p, A_FAST_ALPHA, &q->fast_alpha, &q->has_fa) < 0 || get_d(p, A_FAST_GAMMA, &q->fast_gamma, NULL) < 0)
        return -1;
    q->mss = (double)q->mss_i;
    q->min_cwnd = (double)(q->min_cwnd_pkts * q->mss_i);  /* (an int product in Python: exact below 2^53) */
    return 0;
}

/* The last CCParams read, and what it held: CCParams is a frozen dataclass (cc.py), one per endpoint, so the same
 * object has the same fields, and holding a reference keeps its address from naming another object. Read once,
 * not on every ACK and pick (those ~20 attribute reads were a tenth of the sender's CPU on a paced link). */
static PyObject *ccp_obj;
static CCP ccp_last;

static int ccp_get(PyObject *cc, CCP *q)
{
    PyObject *p = PyObject_GetAttr(cc, ATTR[A_P]);
    if (p == NULL)
        return -1;
    if (p != ccp_obj) {
        if (ccp_load(p, &ccp_last) < 0) {
            Py_DECREF(p);
            Py_CLEAR(ccp_obj);
            return -1;
        }
        Py_XSETREF(ccp_obj, p);  /* (keeps the new reference) */
    } else {
        Py_DECREF(p);
    }
    *q = ccp_last;
    return 0;
}

/* What tx_pick needs of the window (cc_window, cc_pacing_rate): cwnd, ssthresh, rate, ack_delay, srtt. */
static int cc_load_pick(PyObject *cc, CC *c)
{
    if (ccp_get(cc, &c->p) < 0)
        return -1;
    return get_d(cc, A_CWND, &c->cwnd, NULL) < 0 || get_d(cc, A_SSTHRESH, &c->ssthresh, NULL) < 0
        || get_d(cc, A_RATE, &c->rate, NULL) < 0 || get_d(cc, A_ACK_DELAY, &c->ack_delay, NULL) < 0
        || get_d(cc, A_SRTT, &c->srtt, &c->has_srtt) < 0 ? -1 : 0;
}

static int cc_load(PyObject *cc, CC *c)
{
    memset(c, 0, sizeof *c);  /* (the undo slots too, which only an undo tuple fills) */
    if (ccp_get(cc, &c->p) < 0)
        return -1;
    if (get_d(cc, A_CWND, &c->cwnd, NULL) < 0 || get_d(cc, A_SSTHRESH, &c->ssthresh, NULL) < 0
        || get_d(cc, A_ALPHA, &c->alpha, NULL) < 0 || get_d(cc, A_SRTT, &c->srtt, &c->has_srtt) < 0
        || get_d(cc, A_ACK_DELAY, &c->ack_delay, NULL) < 0 || get_d(cc, A_RATE, &c->rate, NULL) < 0
        || get_d(cc, A_WIN_START, &c->win_start, &c->has_win_start) < 0
        || get_d(cc, A_RATE_BYTES, &c->rate_bytes, NULL) < 0 || get_d(cc, A_RTTVAR, &c->rttvar, NULL) < 0
        || get_d(cc, A_MIN_RTT, &c->min_rtt, &c->has_min_rtt) < 0 || get_d(cc, A_RTO, &c->rto, NULL) < 0
        || get_ll(cc, A_BACKOFF, &c->backoff) < 0 || get_d(cc, A_WIN_ACKED, &c->win_acked, NULL) < 0
        || get_d(cc, A_WIN_MARKED, &c->win_marked, NULL) < 0 || get_d(cc, A_WIN_TARGET, &c->win_target, NULL) < 0
        || get_d(cc, A_WIN_MIN_Q, &c->win_min_q, NULL) < 0 || get_ll(cc, A_WIN_SAMPLES, &c->win_samples) < 0
        || get_d(cc, A_CWR, &c->cwr, NULL) < 0 || get_d(cc, A_CWR_ACKED, &c->cwr_acked, NULL) < 0
        || get_d(cc, A_CWR_MARKED, &c->cwr_marked, NULL) < 0 || get_ll(cc, A_MARKS_SEEN, &c->marks_seen) < 0
        || get_ll(cc, A_ECN_MARKS, &c->ecn_marks) < 0 || get_ll(cc, A_DELAY_MARKS, &c->delay_marks) < 0
        || get_ll(cc, A_CUTS, &c->cuts) < 0 || get_ll(cc, A_FAST_CUTS, &c->fast_cuts) < 0
        || get_ll(cc, A_HYSTART_EXITS, &c->hystart_exits) < 0 || get_ll(cc, A_SPURIOUS, &c->spurious) < 0
        || get_d(cc, A_RTO_SEED, &c->rto_seed, &c->has_rto_seed) < 0)
        return -1;
    PyObject *u = PyObject_GetAttr(cc, ATTR[A_UNDO]);
    if (u == NULL)
        return -1;
    c->has_undo = u != Py_None;
    if (c->has_undo) {
        if (!PyTuple_Check(u) || PyTuple_GET_SIZE(u) != 4) {
            Py_DECREF(u);
            PyErr_SetString(PyExc_TypeError, "DctcpWindow._undo: expected a 4-tuple or None");
            return -1;
        }
        for (int i = 0; i < 4; i++)
            c->undo[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(u, i));
    }
    Py_DECREF(u);
    return PyErr_Occurred() ? -1 : 0;
}

/* Write back the fields of ``c`` that differ from ``was`` (what cc_load read): bit for bit, so -0.0 and 0.0 differ;
 * an unchanged field keeps its object (an int stays an int where Python would have left it). */
static int cc_store(PyObject *cc, const CC *c, const CC *was)
{
#define CHG(f) (memcmp(&c->f, &was->f, sizeof c->f) != 0)
#define ST_D(f, A) if (CHG(f) && set_d(cc, A, c->f) < 0) return -1
#define ST_LL(f, A) if (CHG(f) && set_ll(cc, A, c->f) < 0) return -1
#define ST_OPT(f, h, A) if ((CHG(f) || c->h != was->h) && set_opt(cc, A, c->h, c->f) < 0) return -1
    ST_D(cwnd, A_CWND); ST_D(ssthresh, A_SSTHRESH); ST_D(alpha, A_ALPHA); ST_OPT(srtt, has_srtt, A_SRTT);
    ST_D(ack_delay, A_ACK_DELAY); ST_D(rate, A_RATE); ST_OPT(win_start, has_win_start, A_WIN_START);
    ST_D(rate_bytes, A_RATE_BYTES); ST_D(rttvar, A_RTTVAR); ST_OPT(min_rtt, has_min_rtt, A_MIN_RTT);
    ST_D(rto, A_RTO); ST_LL(backoff, A_BACKOFF); ST_D(win_acked, A_WIN_ACKED); ST_D(win_marked, A_WIN_MARKED);
    ST_D(win_target, A_WIN_TARGET); ST_D(win_min_q, A_WIN_MIN_Q); ST_LL(win_samples, A_WIN_SAMPLES);
    ST_D(cwr, A_CWR); ST_D(cwr_acked, A_CWR_ACKED); ST_D(cwr_marked, A_CWR_MARKED);
    ST_LL(marks_seen, A_MARKS_SEEN); ST_LL(ecn_marks, A_ECN_MARKS); ST_LL(delay_marks, A_DELAY_MARKS);
    ST_LL(cuts, A_CUTS); ST_LL(fast_cuts, A_FAST_CUTS); ST_LL(hystart_exits, A_HYSTART_EXITS);
    ST_LL(spurious, A_SPURIOUS);
    if (c->has_undo == was->has_undo && (!c->has_undo || !CHG(undo)))
        return 0;
#undef ST_OPT
#undef ST_LL
#undef ST_D
#undef CHG
    if (c->has_undo) {
        PyObject *t = Py_BuildValue("(dddd)", c->undo[0], c->undo[1], c->undo[2], c->undo[3]);
        return set_obj(cc, A_UNDO, t);
    }
    Py_INCREF(Py_None);
    return set_obj(cc, A_UNDO, Py_None);
}

static inline int cc_in_ss(const CC *c) { return c->cwnd < c->ssthresh; }

static double cc_base_rto(const CC *c)  /* DctcpWindow.base_rto */
{
    if (c->has_srtt)
        return pmin(c->p.rto_max, pmax(c->p.rto_min, c->srtt + 4 * c->rttvar));
    return c->has_rto_seed ? c->rto_seed : c->p.rto_init;
}

static long long cc_window(const CC *c)  /* DctcpWindow.window */
{
    if (!c->p.ack_delay_comp)
        return (long long)c->cwnd;
    return (long long)(c->cwnd + pmin(c->rate * c->ack_delay, c->cwnd * c->p.max_ack_stretch));
}

static double cc_pacing_rate(const CC *c)  /* DctcpWindow.pacing_rate */
{
    if (!c->has_srtt)
        return INFINITY;
    double gain = cc_in_ss(c) ? c->p.gain_ss : c->p.gain_ca;
    return gain * (double)cc_window(c) / pmax(c->srtt, c->p.floor);
}

static void cc_clamp(CC *c)
{
    c->cwnd = pmin(pmax(c->cwnd, c->p.min_cwnd), c->p.max_cwnd);
}

static void cc_on_rtt(CC *c, double rtt)
{
    rtt = pmax(rtt, c->p.floor);
    if (!c->has_srtt) {
        c->srtt = rtt;
        c->rttvar = rtt / 2;
        c->has_srtt = 1;
    } else {
        c->rttvar = 0.75 * c->rttvar + 0.25 * fabs(c->srtt - rtt);
        c->srtt = 0.875 * c->srtt + 0.125 * rtt;
    }
    c->min_rtt = !c->has_min_rtt ? rtt : pmin(c->min_rtt, rtt);
    c->has_min_rtt = 1;
    c->rto = cc_base_rto(c);
}

static void cc_end_window(CC *c)
{
    const CCP *p = &c->p;
    double q_min = c->win_min_q;
    long long samples = c->win_samples;
    c->win_min_q = INFINITY;
    c->win_samples = 0;
    double frac = c->win_acked != 0 ? c->win_marked / c->win_acked : 0.0;
    c->alpha = (1 - p->g) * c->alpha + p->g * frac;
    if (c->win_marked != 0) {
        c->cwr = c->cwnd;
        c->cwnd = c->cwnd * (1 - c->alpha / 2);
        c->ssthresh = c->cwnd;
        c->cuts++;
    } else if (p->has_fa && p->has_dt && !cc_in_ss(c) && samples >= 2 && c->has_min_rtt) {
        double base = c->min_rtt;
        double target = c->cwnd * base / (base + q_min) + p->fast_alpha;
        double nw = pmin(2 * c->cwnd, (1 - p->fast_gamma) * c->cwnd + p->fast_gamma * target);
        if (nw < c->cwnd) {
            c->cwr = c->cwnd;
            c->fast_cuts++;
        }
        c->cwnd = nw;
    }
    c->win_acked = c->win_marked = 0.0;
    cc_clamp(c);
    c->win_target = c->cwnd;
}

/* DctcpWindow.on_ack; has_rtt/has_q/has_now: the optional arguments given */
static void cc_on_ack(CC *c, long long acked, int ecn, int has_rtt, double rtt, int has_q, double qdelay,
                      int has_now, double now)
{
    const CCP *p = &c->p;
    c->backoff = 0;
    c->has_undo = 0;
    int delay = 0;
    int cwr = c->cwr > 0;
    if (has_rtt) {
        if (c->has_min_rtt && !cwr) {
            double q = has_q ? qdelay : pmax(rtt, p->floor) - c->min_rtt;
            c->win_min_q = pmin(c->win_min_q, q);
            c->win_samples++;
            double q_min = c->win_min_q;
            delay = c->win_samples >= 2 && p->has_dt && q_min > p->delay_target;
            if (cc_in_ss(c) && c->win_samples >= 2 && p->has_hd && q_min > p->hystart_delay) {
                double keep = (c->min_rtt + p->hystart_delay) / (c->min_rtt + q_min);
                c->cwnd = pmax(c->cwnd * keep, p->min_cwnd);
                c->ssthresh = c->cwnd;
                c->win_target = pmin(c->win_target, c->cwnd);
                c->hystart_exits++;
            }
        }
        cc_on_rtt(c, rtt);
        if (has_q) {
            double d = pmax(0.0, rtt - c->min_rtt - qdelay);
            c->ack_delay = 0.875 * c->ack_delay + 0.125 * d;
        }
    }
    if (has_now && acked > 0) {
        if (!c->has_win_start) {
            c->win_start = now;
            c->has_win_start = 1;
        }
        c->rate_bytes += (double)acked;
        if (now - c->win_start >= pmax(c->has_srtt && c->srtt != 0 ? c->srtt : 0.0, 1e-3)) {
            double r = c->rate_bytes / (now - c->win_start);
            c->rate = c->rate == 0 ? r : 0.5 * c->rate + 0.5 * r;
            c->win_start = now;
            c->rate_bytes = 0.0;
        }
    }
    if (acked <= 0)
        return;
    double a = (double)acked;
    if (cwr) {
        c->cwr -= a;
        c->cwr_acked += a;
        if (ecn) {
            c->marks_seen++;
            c->ecn_marks++;
            c->cwr_marked += a;
        }
        if (c->cwr <= 0) {
            c->alpha = (1 - p->g) * c->alpha + p->g * c->cwr_marked / c->cwr_acked;
            c->cwr = c->cwr_acked = c->cwr_marked = 0.0;
            c->win_target = c->cwnd;
        }
        return;
    }
    int marked = ecn || delay;
    if (marked) {
        c->marks_seen++;
        c->ecn_marks += ecn != 0;
        c->delay_marks += delay && !ecn;
    }
    c->win_acked += a;
    if (marked)
        c->win_marked += a;
    if (c->win_marked == 0) {
        if (cc_in_ss(c))
            c->cwnd += a;
        else if (p->has_fa && p->has_dt)
            ;  /* FAST moves the window once per observation window */
        else if (p->has_pd && c->win_samples >= 2 && c->win_min_q < p->probe_delay)
            c->cwnd += p->css_growth * a;
        else
            c->cwnd += (double)(p->mss_i * acked) / c->cwnd;
    }
    if (c->win_acked >= c->win_target)
        cc_end_window(c);
    cc_clamp(c);
}

static int cc_undo_timeout(CC *c)  /* DctcpWindow.undo_timeout */
{
    if (!c->has_undo)
        return 0;
    c->cwnd = c->undo[0];
    c->ssthresh = c->undo[1];
    c->win_target = c->undo[2];
    c->rto = c->undo[3];
    c->has_undo = 0;
    c->spurious++;
    return 1;
}

/* ---- a cumulative ACK: sender.on_cum_ack ---------------------------------------------------------------------- */

/* a writable 1-d buffer of ``n`` items of ``itemsize`` bytes, the attribute ``a`` of ``obj`` */
static int arr_get(PyObject *obj, int a, Py_buffer *v, Py_ssize_t itemsize, Py_ssize_t n)
{
    PyObject *x = PyObject_GetAttr(obj, ATTR[a]);
    if (x == NULL)
        return -1;
    int r = PyObject_GetBuffer(x, v, PyBUF_WRITABLE);
    Py_DECREF(x);
    if (r < 0)
        return -1;
    if (v->len != itemsize * n) {
        PyBuffer_Release(v);
        PyErr_Format(PyExc_ValueError, "sender state: array %s holds %zd bytes, expected %zd", ATTR_NAMES[a], v->len,
                     itemsize * n);
        return -1;
    }
    return 0;
}

static int list_ll(PyObject *list, Py_ssize_t i, long long *out)
{
    if (!PyList_Check(list) || i < 0 || i >= PyList_GET_SIZE(list)) {
        PyErr_Format(PyExc_IndexError, "sender state: index %zd outside a list of byte prefix sums", i);
        return -1;
    }
    long long v = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

/* PeerState.one_way_queue, with the peer's owd_base/owd_min read and written here */
static int one_way_queue(PyObject *p, long long ts, double sent, double *out)
{
    long long raw = (ts - ((long long)(sent * 1e6) & 0xFFFFFFFFLL)) & 0xFFFFFFFFLL;  /* control.clock_us */
    double base_d;
    int has_base;
    long long mn;
    if (get_d(p, A_OWD_BASE, &base_d, &has_base) < 0 || get_ll(p, A_OWD_MIN, &mn) < 0)
        return -1;
    long long base = (long long)base_d;
    if (!has_base) {
        base = raw;
        if (set_ll(p, A_OWD_BASE, base) < 0)
            return -1;
    }
    long long d = ((raw - base + (1LL << 31)) & 0xFFFFFFFFLL) - (1LL << 31);
    if (d < mn) {
        mn = d;
        if (set_ll(p, A_OWD_MIN, mn) < 0)
            return -1;
    }
    *out = (double)(d - mn) * 1e-6;
    return 0;
}

/* sender._progress: packets of ``o`` were newly ACKed at ``now`` (the RTO clock and the tail probes start again;
 * a backed-off RTO returns to its base, in the window ``c`` the caller stores). 0, or -1 with an exception set. */
static int tx_progress(PyObject *p, PyObject *o, CC *c, double now)
{
    if (set_d(o, A_PROGRESS, now) < 0 || set_d(p, A_PROGRESS, now) < 0 || set_ll(o, A_PROBES, 0) < 0
        || set_d(p, A_RTO_AT, 0.0) < 0)
        return -1;
    if (c->backoff)
        c->rto = cc_base_rto(c);
    return 0;
}

/* sender.on_cum_ack(p, o, hi, ecn, now, ts): everything below ``hi`` ACKed (the caller checked the shape: no
 * hole open, hi <= next_seq) */
static int tx_cum_ack(PyObject *p, PyObject *o, long long hi, int ecn, double now, long long ts)
{
    long long lo, total;
    if (get_ll(o, A_CUM_ACKED, &lo) < 0 || get_ll(o, A_TOTAL, &total) < 0)
        return -1;
    if (hi > total || lo < 0 || lo > total) {
        PyErr_Format(PyExc_ValueError, "cum_ack: ACK of %lld packets (cum_acked %lld) of a transfer of %lld", hi, lo,
                     total);
        return -1;
    }
    PyObject *ccobj = PyObject_GetAttr(p, ATTR[A_CC]);
    if (ccobj == NULL)
        return -1;
    CC c, was;
    int ret = -1, has_rtt = 0, has_q = 0;
    double rtt = 0, qdelay = 0;
    long long nbytes = 0;
    Py_buffer vack = {0}, vinf = {0}, vord = {0}, vtime = {0}, vretx = {0}, vlen = {0};
    PyObject *plan = NULL, *cuml = NULL;
    if (cc_load(ccobj, &c) < 0)
        goto out;
    was = c;
    double rto_fired;
    if (get_d(p, A_RTO_FIRED, &rto_fired, NULL) < 0)
        goto out;
    if (hi > lo) {
        if (arr_get(o, A_ACKED, &vack, 1, total) < 0 || arr_get(o, A_INFLIGHT, &vinf, 1, total) < 0
            || arr_get(o, A_SENT_ORDER, &vord, 8, total) < 0 || arr_get(o, A_SENT_TIME, &vtime, 8, total) < 0
            || arr_get(o, A_RETX, &vretx, 1, total) < 0)
            goto out;
        plan = PyObject_GetAttr(o, ATTR[A_PLAN]);
        if (plan == NULL || arr_get(plan, A_LENGTHS, &vlen, 8, total) < 0)
            goto out;
        cuml = PyObject_GetAttr(o, ATTR[A_CUML]);
        long long c_hi, c_lo;
        if (cuml == NULL || list_ll(cuml, hi, &c_hi) < 0 || list_ll(cuml, lo, &c_lo) < 0)
            goto out;
        uint8_t *acked = vack.buf, *infl = vinf.buf, *retx = vretx.buf;
        const int64_t *order = vord.buf, *lens = vlen.buf;
        const double *stime = vtime.buf;
        memset(acked + lo, 1, (size_t)(hi - lo));
        if (tx_progress(p, o, &c, now) < 0)
            goto out;
        nbytes = c_hi - c_lo;
        long long pin;
        if (get_ll(p, A_INFLIGHT, &pin) < 0)
            goto out;
        long long all = 1, part = 0;
        for (long long s = lo; s < hi; s++) {
            if (infl[s])
                part += lens[s];
            else
                all = 0;
        }
        pin -= all ? nbytes : part;
        memset(infl + lo, 0, (size_t)(hi - lo));
        if (set_ll(p, A_INFLIGHT, pin) < 0)
            goto out;
        long long s = lo;  /* argmax of sent_order[lo:hi], the first of equals */
        for (long long k = lo + 1; k < hi; k++)
            if (order[k] > order[s])
                s = k;
        if (!retx[s]) {
            has_rtt = has_q = 1;
            rtt = now - stime[s];
            if (one_way_queue(p, ts, stime[s], &qdelay) < 0)
                goto out;
        }
        if (set_ll(o, A_CUM_ACKED, hi) < 0 || set_ll(o, A_ACKED_HI, hi) < 0)
            goto out;
        if (rto_fired != 0) {
            for (long long k = lo; k < hi; k++)
                if (stime[k] < rto_fired && !retx[k]) {
                    cc_undo_timeout(&c);
                    break;
                }
        }
    }
    if (rto_fired != 0 && set_d(p, A_RTO_FIRED, 0.0) < 0)
        goto out;
    cc_on_ack(&c, nbytes, ecn, has_rtt, rtt, has_q, qdelay, 1, now);
    ret = cc_store(ccobj, &c, &was);
out:
    if (vack.obj) PyBuffer_Release(&vack);
    if (vinf.obj) PyBuffer_Release(&vinf);
    if (vord.obj) PyBuffer_Release(&vord);
    if (vtime.obj) PyBuffer_Release(&vtime);
    if (vretx.obj) PyBuffer_Release(&vretx);
    if (vlen.obj) PyBuffer_Release(&vlen);
    Py_XDECREF(plan);
    Py_XDECREF(cuml);
    Py_DECREF(ccobj);
    return ret;
}

/* ---- a general ACK (with a bitmap): sender.on_ack ------------------------------------------------------------
 *
 * Why: on paths that reorder (per-packet spraying) or drop eligible packets most ACKs carry a bitmap; taken by the
 * Python sender (a scan in C, the window and the bookkeeping in Python) each cost a demo worker's I/O thread ~40 us
 * of interpreter, about a tenth of its CPU, and every one of them inside rx_wait was a call back into Python. */

/* 1 when ``len`` bytes hold exactly the ``count`` bits of a bitmap (MSB first) with its padding bits 0 */
static int bitmap_ok(const uint8_t *bm, Py_ssize_t len, long long count)
{
    return count >= 0 && len == (count + 7) / 8 && !(count % 8 && (bm[count / 8] & (0xFF >> (count % 8))));
}

typedef struct {
    long long n_new, nbytes, infl_bytes, lost_bytes;
    Py_ssize_t newest, top, cum;  /* the newest-sent new seq, the highest new seq (-1: none), the new cum_acked */
    double first_clean;  /* the earliest send time of a new packet never resent (inf: none) */
} AckScan;

/* The per-seq work of an ACK of every seq below ``base`` and of the seqs ``base + i`` set in the (well-formed)
 * bitmap ``bm`` of ``count`` bits, on a send's arrays (``lo``: its cum_acked): mark the new seqs (sent ones only)
 * acked and not in flight, then judge lost, in ``lo .. min(total, base + count)``, what is in flight, unacked,
 * sent more than ``reorder_pkts`` sends and ``reo`` seconds before the newest acked packet (no longer in flight;
 * protected ones not queued yet are marked queued and appended to the list ``prot``). 0, or -1 with an exception
 * set (``prot`` could not grow). */
static int ack_scan_run(uint8_t *acked, uint8_t *inflight, uint8_t *queued, const uint8_t *retx, const uint8_t *elig,
                        const int64_t *order, const double *stime, const int64_t *lens, const uint8_t *bm,
                        Py_ssize_t count, Py_ssize_t lo, Py_ssize_t base, Py_ssize_t total, double reo,
                        long long reorder_pkts, PyObject *prot, AckScan *r)
{
    long long n_new = 0, nbytes = 0, infl_bytes = 0, lost_bytes = 0;
    Py_ssize_t newest = -1, top = -1;
    int64_t newest_order = -1;
    double first_clean = INFINITY;
    /* the new seqs, ascending: unacked below base (from lo), then the bitmap's */
    Py_ssize_t hi = base + count;
    for (Py_ssize_t s = lo < base ? lo : base; s < hi; s++) {
        if (s < base) {
            if (s < lo)
                continue;
        } else if (!(bm[(s - base) >> 3] & (0x80 >> ((s - base) & 7)))) {
            continue;
        }
        if (acked[s] || order[s] < 0)
            continue;
        acked[s] = 1;
        n_new++;
        nbytes += lens[s];
        if (inflight[s]) {
            inflight[s] = 0;
            infl_bytes += lens[s];
        }
        if (order[s] > newest_order) {
            newest_order = order[s];
            newest = s;
        }
        top = s;
        if (!retx[s] && stime[s] < first_clean)
            first_clean = stime[s];
    }
    if (n_new) {
        /* loss detection by send order and time over lo .. min(total, base + count) */
        Py_ssize_t end = hi < total ? hi : total;
        double cutoff = stime[newest] - reo;
        int64_t before = newest_order - reorder_pkts;
        for (Py_ssize_t s = lo; s < end; s++) {
            if (!inflight[s] || acked[s] || order[s] >= before || stime[s] > cutoff)
                continue;
            inflight[s] = 0;
            lost_bytes += lens[s];
            if (!elig[s] && !queued[s]) {
                queued[s] = 1;
                PyObject *k = PyLong_FromSsize_t(s);
                if (k == NULL || PyList_Append(prot, k) < 0) {
                    Py_XDECREF(k);
                    return -1;
                }
                Py_DECREF(k);
            }
        }
    }
    Py_ssize_t cum = lo;
    while (cum < total && acked[cum])
        cum++;
    r->n_new = n_new;
    r->nbytes = nbytes;
    r->infl_bytes = infl_bytes;
    r->lost_bytes = lost_bytes;
    r->newest = newest;
    r->top = top;
    r->cum = cum;
    r->first_clean = first_clean;
    return 0;
}

/* sender.on_ack(p, o, base, bits, ecn, now, ts) for the ACK whose bitmap is the ``bmlen`` bytes at ``bm`` (``count``
 * bits; the caller checked base + count <= o.total): the new packets marked, losses judged (protected ones queued
 * for retransmission), the RTT sample, the timeout's undo and the window, the same state afterwards
 * (tests/host/test_ack_scan.py). ``reo_floor``, ``reorder_pkts``: control.REORDER_TIME and sender.REORDER_PKTS.
 * 1 taken, 0 a malformed bitmap (nothing changed: the caller names the field), -1 with an exception set. */
static int tx_bitmap_ack(PyObject *p, PyObject *o, long long base, const uint8_t *bm, Py_ssize_t bmlen,
                         long long count, int ecn, double now, long long ts, double reo_floor, long long reorder_pkts)
{
    if (!bitmap_ok(bm, bmlen, count))
        return 0;
    long long lo, total, acked_hi;
    if (get_ll(o, A_CUM_ACKED, &lo) < 0 || get_ll(o, A_TOTAL, &total) < 0 || get_ll(o, A_ACKED_HI, &acked_hi) < 0)
        return -1;
    if (base < 0 || lo < 0 || lo > total || base + count > total) {
        PyErr_Format(PyExc_ValueError, "bitmap_ack: an ACK of seqs below %lld + %lld (cum_acked %lld) of a transfer "
                     "of %lld", base, count, lo, total);
        return -1;
    }
    PyObject *ccobj = PyObject_GetAttr(p, ATTR[A_CC]);
    if (ccobj == NULL)
        return -1;
    CC c, was;
    int ret = -1, has_rtt = 0, has_q = 0;
    double rtt = 0, qdelay = 0, rto_fired;
    Py_buffer v[8];
    int got = 0;
    PyObject *plan = NULL, *prot = NULL;
    AckScan r;
    if (cc_load(ccobj, &c) < 0 || get_d(p, A_RTO_FIRED, &rto_fired, NULL) < 0)
        goto out;
    was = c;
    plan = PyObject_GetAttr(o, ATTR[A_PLAN]);
    if (plan == NULL)
        goto out;
    {
        static const int attr[8] = {A_ACKED, A_INFLIGHT, A_QUEUED, A_RETX, A_ELIGIBLE, A_SENT_ORDER, A_SENT_TIME,
                                    A_LENGTHS};
        static const Py_ssize_t size[8] = {1, 1, 1, 1, 1, 8, 8, 8};
        for (; got < 8; got++)
            if (arr_get(got == 4 || got == 7 ? plan : o, attr[got], &v[got], size[got], total) < 0)
                goto out;
    }
    double reo = c.has_min_rtt && c.min_rtt != 0 ? pmax(reo_floor, 0.25 * c.min_rtt) : reo_floor;
    prot = PyList_New(0);
    if (prot == NULL
        || ack_scan_run(v[0].buf, v[1].buf, v[2].buf, v[3].buf, v[4].buf, v[5].buf, v[6].buf, v[7].buf, bm,
                        (Py_ssize_t)count, (Py_ssize_t)lo, (Py_ssize_t)base, (Py_ssize_t)total, reo, reorder_pkts,
                        prot, &r) < 0)
        goto out;
    if (r.n_new) {
        if (tx_progress(p, o, &c, now) < 0)
            goto out;
        if (r.top >= acked_hi && set_ll(o, A_ACKED_HI, r.top + 1) < 0)
            goto out;
        long long pin;
        if (get_ll(p, A_INFLIGHT, &pin) < 0 || set_ll(p, A_INFLIGHT, pin - (r.infl_bytes + r.lost_bytes)) < 0)
            goto out;
        if (!((const uint8_t *)v[3].buf)[r.newest]) {
            double sent = ((const double *)v[6].buf)[r.newest];
            has_rtt = has_q = 1;
            rtt = now - sent;
            if (one_way_queue(p, ts, sent, &qdelay) < 0)
                goto out;
        }
        if (PyList_GET_SIZE(prot)) {
            PyObject *q = PyObject_GetAttr(o, ATTR[A_RETXQ]);
            PyObject *res = q != NULL ? PyObject_CallMethod(q, "extend", "O", prot) : NULL;
            Py_XDECREF(q);
            if (res == NULL)
                goto out;
            Py_DECREF(res);
        }
    }
    if (set_ll(o, A_CUM_ACKED, r.cum) < 0)
        goto out;
    if (rto_fired != 0) {
        if (r.n_new && r.first_clean < rto_fired)
            cc_undo_timeout(&c);  /* data sent before the timeout got through: the timeout was spurious */
        if (set_d(p, A_RTO_FIRED, 0.0) < 0)
            goto out;
    }
    cc_on_ack(&c, r.nbytes, ecn, has_rtt, rtt, has_q, qdelay, 1, now);
    ret = cc_store(ccobj, &c, &was) < 0 ? -1 : 1;
out:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&v[k]);
    Py_XDECREF(prot);
    Py_XDECREF(plan);
    Py_DECREF(ccobj);
    return ret;
}

/* ---- the next burst to the one peer with sends in progress: Sender.pick_burst ----------------------------------- */

/* The burst Sender.pick_burst would choose now when ``p`` is the only peer with sends in progress and none of them
 * has a retransmission queued: new packets [*s0, *s1) of *nbytes payload bytes of the transfer *o_out (a new
 * reference: the first of p.active, in its order, that no caller is sending and that has packets ready), with the
 * same state changes (seqs sent, in flight, pacing); 1 when it chose one, 0 when none may leave (*wait: seconds
 * until pacing allows one, or 1.0 when the window is full or nothing is ready), 2 when the state is not that shape
 * (the Python pick decides), -1 with an exception set. ``send_buf``: Options.send_buf (what SO_SNDBUF must be set
 * to already). */
static int tx_pick(PyObject *sender, PyObject *p, double now, long long burst, long long send_buf,
                   PyObject **o_out, long long *s0_out, long long *s1_out, long long *nbytes_out, double *wait)
{
    *wait = 1.0;
    *o_out = NULL;
    long long n_active, sb, next_seq = 0, ready = 0, total = 0;
    if (get_ll(sender, A_N_ACTIVE, &n_active) < 0 || get_ll(sender, A_SEND_BUF, &sb) < 0)
        return -1;
    if (n_active < 1 || sb != send_buf)
        return 2;
    PyObject *act = PyObject_GetAttr(p, ATTR[A_ACTIVE]);
    if (act == NULL)
        return -1;
    /* every transfer in progress is p's (pick_burst's one peer), none has a retransmission queued; the pick: the
     * first one not being sent by a caller with packets ready (pick_burst's loop over p.active) */
    if (!PyList_Check(act) || PyList_GET_SIZE(act) != n_active) {
        Py_DECREF(act);
        return 2;
    }
    PyObject *o = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(act); i++) {
        PyObject *x = PyList_GET_ITEM(act, i), *v;
        if ((v = PyObject_GetAttr(x, ATTR[A_SENDING])) == NULL)
            goto fail;
        int sending = PyObject_IsTrue(v);
        Py_DECREF(v);
        if (sending < 0)
            goto fail;
        if (sending)
            continue;
        if ((v = PyObject_GetAttr(x, ATTR[A_RETXQ])) == NULL)
            goto fail;
        Py_ssize_t nq = PyObject_Length(v);
        Py_DECREF(v);
        if (nq < 0)
            goto fail;
        if (nq) {
            Py_DECREF(act);
            return 2;
        }
        if (o == NULL) {
            long long ns, rd;
            if (get_ll(x, A_NEXT_SEQ, &ns) < 0 || get_ll(x, A_READY, &rd) < 0)
                goto fail;
            if (ns < rd) {
                o = x;
                next_seq = ns;
                ready = rd;
            }
        }
    }
    Py_XINCREF(o);
    Py_DECREF(act);
    if (o == NULL)
        return 0;  /* (nothing ready: no burst, no deadline) */
    long long copies = 1;
    if (get_ll(o, A_TOTAL, &total) < 0 || (total == 1 && get_ll(o, A_COPIES, &copies) < 0)) {
        Py_DECREF(o);
        return -1;
    }
    if (copies > 1) {  /* (a one-packet transfer sent in copies: Transmitter.transmit's, so the Python pick's) */
        Py_DECREF(o);
        return 2;
    }
    PyObject *ccobj = PyObject_GetAttr(p, ATTR[A_CC]);
    if (ccobj == NULL) {
        Py_DECREF(o);
        return -1;
    }
    CC c;
    int ret = -1;
    PyObject *cuml = NULL;
    Py_buffer vord = {0}, vtime = {0}, vinf = {0};
    long long pin, order, n_elig, pkts;
    double next_send;
    if (cc_load_pick(ccobj, &c) < 0 || get_ll(p, A_INFLIGHT, &pin) < 0 || get_d(p, A_NEXT_SEND, &next_send, NULL) < 0)
        goto out;
    long long avail = cc_window(&c) - pin;
    if (avail <= 0) {
        ret = 0;
        goto out;
    }
    if (now < next_send) {
        *wait = pmin(1.0, next_send - now);
        ret = 0;
        goto out;
    }
    if (set_d(o, A_LAST_SENT, now) < 0 || set_ll(sender, A_RR, 0) < 0)  /* ((rr + 0 + 1) % 1) */
        goto out;
    long long s0 = next_seq, c0, cs;
    cuml = PyObject_GetAttr(o, ATTR[A_CUML]);
    if (cuml == NULL || list_ll(cuml, s0, &c0) < 0)
        goto out;
    long long target = c0 + avail, s1 = s0 + 1;  /* bisect_left(cuml, target, s0, ready): cuml[s0] < target */
    for (;;) {
        if (s1 >= ready)
            break;
        if (list_ll(cuml, s1, &cs) < 0)
            goto out;
        if (cs >= target)
            break;
        s1++;
    }
    if (s1 > s0 + burst)
        s1 = s0 + burst;
    long long m = s1 - s0;
    if (get_ll(o, A_ORDER, &order) < 0 || get_ll(o, A_N_ELIG, &n_elig) < 0 || get_ll(o, A_PKTS_SENT, &pkts) < 0
        || arr_get(o, A_SENT_ORDER, &vord, 8, total) < 0 || arr_get(o, A_SENT_TIME, &vtime, 8, total) < 0
        || arr_get(o, A_INFLIGHT, &vinf, 1, total) < 0)
        goto out;
    int64_t *ord = vord.buf;
    double *stime = vtime.buf;
    for (long long k = 0; k < m; k++) {
        ord[s0 + k] = order + k;
        stime[s0 + k] = now;
    }
    long long e = s0 > n_elig ? s0 : n_elig;
    if (e > s1)
        e = s1;
    memset((uint8_t *)vinf.buf + e, 1, (size_t)(s1 - e));
    long long c1, ce;
    if (list_ll(cuml, s1, &c1) < 0 || list_ll(cuml, e, &ce) < 0)
        goto out;
    long long nbytes = c1 - c0;
    double rate = cc_pacing_rate(&c);
    if (isfinite(rate))
        next_send = pmax(next_send, now - 0.0005) + (double)nbytes / rate;
    if (set_ll(o, A_NEXT_SEQ, s1) < 0 || set_ll(o, A_ORDER, order + m) < 0 || set_ll(p, A_INFLIGHT, pin + c1 - ce) < 0
        || set_ll(o, A_PKTS_SENT, pkts + m) < 0 || set_d(p, A_NEXT_SEND, next_send) < 0)
        goto out;
    *s0_out = s0;
    *s1_out = s1;
    *nbytes_out = nbytes;
    *wait = 0.0;
    *o_out = o;
    o = NULL;
    ret = 1;
out:
    if (vord.obj) PyBuffer_Release(&vord);
    if (vtime.obj) PyBuffer_Release(&vtime);
    if (vinf.obj) PyBuffer_Release(&vinf);
    Py_XDECREF(cuml);
    Py_DECREF(ccobj);
    Py_XDECREF(o);
    return ret;
fail:
    Py_DECREF(act);
    return -1;
}

/* ---- Python entry points (the twin tests', and the Python loop's cumulative ACKs) ---------------------------- */

PyDoc_STRVAR(cum_ack_doc,
"cum_ack(p, o, hi, ecn, now, ts)\n"
"--\n\n"
"sender.on_cum_ack in C: every packet of ``o`` (an OutTransfer of PeerState ``p``) below ``hi`` ACKed, by an ACK\n"
"with ECN-Echo ``ecn`` sent at the receiver's clock ``ts``; the window (p.cc) told. The caller checked the ACK's\n"
"shape (no hole open at the sender, hi <= o.next_seq). The same state afterwards as the Python function\n"
"(tests/host/test_txstep.py).");

static PyObject *cum_ack(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "cum_ack takes 6 arguments, got %zd", nargs);
        return NULL;
    }
    long long hi = PyLong_AsLongLong(args[2]), ts = PyLong_AsLongLong(args[5]);
    int ecn = PyObject_IsTrue(args[3]);
    double now = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred() || ecn < 0)
        return NULL;
    if (tx_cum_ack(args[0], args[1], hi, ecn, now, ts) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(bitmap_ack_doc,
"bitmap_ack(p, o, base, bitmap, count, ecn, now, ts, reo_floor, reorder_pkts)\n"
"--\n\n"
"sender.on_ack in C: an ACK of every packet of ``o`` (an OutTransfer of PeerState ``p``) below ``base`` and of the\n"
"seqs ``base + i`` whose bit i is set in ``bitmap`` (the ACK's payload: ``count`` bits, MSB first, padding bits 0),\n"
"with ECN-Echo ``ecn``, sent at the receiver's clock ``ts``; ``reo_floor`` and ``reorder_pkts`` are the loss\n"
"detection's REORDER_TIME and REORDER_PKTS. True when taken (the same state afterwards as the Python function:\n"
"tests/host/test_ack_scan.py); False, changing nothing, for a malformed bitmap.");

static PyObject *bitmap_ack(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "bitmap_ack takes 10 arguments, got %zd", nargs);
        return NULL;
    }
    long long base = PyLong_AsLongLong(args[2]), count = PyLong_AsLongLong(args[4]), ts = PyLong_AsLongLong(args[7]);
    long long reorder_pkts = PyLong_AsLongLong(args[9]);
    int ecn = PyObject_IsTrue(args[5]);
    double now = PyFloat_AsDouble(args[6]), reo_floor = PyFloat_AsDouble(args[8]);
    if (PyErr_Occurred() || ecn < 0)
        return NULL;
    Py_buffer vb;
    if (PyObject_GetBuffer(args[3], &vb, PyBUF_SIMPLE) < 0)
        return NULL;
    int r = tx_bitmap_ack(args[0], args[1], base, vb.buf, vb.len, count, ecn, now, ts, reo_floor, reorder_pkts);
    PyBuffer_Release(&vb);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

PyDoc_STRVAR(pick_peer_doc,
"pick_peer(sender, p, now, burst, send_buf)\n"
"--\n\n"
"Sender.pick_burst in C while PeerState ``p`` is the only peer with sends in progress and none of them has a\n"
"retransmission queued: (o, s0, s1, nbytes) for the burst of new packets s0..s1-1 of transfer ``o`` it chose (the\n"
"state changed as pick_burst changes it), (None, wait) when none may leave now, or None when the state is not\n"
"that shape.");

static PyObject *pick_peer(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "pick_peer takes 5 arguments, got %zd", nargs);
        return NULL;
    }
    double now = PyFloat_AsDouble(args[2]);
    long long burst = PyLong_AsLongLong(args[3]), send_buf = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    long long s0, s1, nbytes;
    double wait;
    PyObject *o;
    int r = tx_pick(args[0], args[1], now, burst, send_buf, &o, &s0, &s1, &nbytes, &wait);
    if (r < 0)
        return NULL;
    if (r == 2)
        Py_RETURN_NONE;
    if (r == 0)
        return Py_BuildValue("(Od)", Py_None, wait);
    PyObject *res = Py_BuildValue("(OLLL)", o, s0, s1, nbytes);
    Py_DECREF(o);
    return res;
}
