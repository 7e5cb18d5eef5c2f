# The step bookkeeping of the device checks (scripts/gpu_check.sh, scripts/gpu_scale.sh), sourced by them. Set
# STEP_TAG (what messages start with) and STEPS_FILE (one line per step) first.
FAILED=()
STATUS=0
BIT=1

# run_step NAME SECONDS COMMAND...: run COMMAND under `timeout -k 15 SECONDS`; add its line to STEPS_FILE, and its
# bit to STATUS when it failed (the steps' bits go 1, 2, 4, ... in the order they run). Sets STEP_RC and STEP_S.
run_step() {
    local name=$1 limit=$2
    shift 2
    echo
    echo "== $name"
    local start=$SECONDS
    timeout -k 15 "$limit" "$@"
    STEP_RC=$?
    case $STEP_RC in
        0) ;;
        124 | 137) echo "$STEP_TAG: $name: stopped after its $limit s (exit $STEP_RC)" ;;
        *) echo "$STEP_TAG: $name: exit $STEP_RC" ;;
    esac
    if [ "$STEP_RC" -ne 0 ]; then
        FAILED+=("$name (exit $STEP_RC)")
        STATUS=$((STATUS + BIT))
    fi
    BIT=$((BIT * 2))
    STEP_S=$((SECONDS - start))
    printf '%-12s exit %3d %5d s\n' "$name" "$STEP_RC" "$STEP_S" >> "$STEPS_FILE"
}

# limited SECONDS: SECONDS, or what is left of BUDGET less the kill grace, whichever is less (at least 1)
limited() {
    local limit=$1 left=$((BUDGET - SECONDS - 15))
    [ "$left" -lt "$limit" ] && limit=$((left > 1 ? left : 1))
    echo "$limit"
}

# finish_steps: print the step table and exit with STATUS, naming the failed steps
finish_steps() {
    echo
    cat "$STEPS_FILE"
    if [ "$STATUS" -ne 0 ]; then
        echo "$STEP_TAG: failed steps: $(IFS=,; echo "${FAILED[*]}" | sed 's/,/, /g'); exit status $STATUS"
        exit "$STATUS"
    fi
    echo "$STEP_TAG: every step passed"
    exit 0
}
