# bash completion for ephemeral(1) and ephemerald(8). Installed by `make install` into
# $(PREFIX)/share/bash-completion/completions; or: source dist/completion/ephemeral.bash
#
# The flags are read from the programs' own --help, so the completion never lists a flag a program
# does not take, nor misses one it does.

_ephemeral_flags() { # program words... : the flags of that command's --help
    "$@" --help 2>/dev/null | grep -o -- '--[a-z][a-z0-9-]*' | sort -u
}

_ephemeral() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    local prog=${COMP_WORDS[0]}
    COMPREPLY=()
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "run get list watch replay transcript outputs cancel balance sandbox help --help --version" -- "$cur"))
        return
    fi
    local cmd=${COMP_WORDS[1]}
    if [ "$cmd" = sandbox ]; then
        if [ "$COMP_CWORD" -eq 2 ]; then
            COMPREPLY=($(compgen -W "create exec cp ls rm list get watch help --help" -- "$cur"))
            return
        fi
        cmd="sandbox ${COMP_WORDS[2]}"
    fi
    case $prev in
    --file | --output) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --dir) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    --status)
        [[ $cmd == sandbox* ]] &&
            COMPREPLY=($(compgen -W "starting ready stopped timed_out budget_exhausted failed" -- "$cur")) ||
            COMPREPLY=($(compgen -W "queued starting running completed failed timed_out budget_exhausted cancelled" -- "$cur"))
        return
        ;;
    --prompt | --timeout | --budget | --max-cost-micros | --model | --connection | --metadata | \
        --web-allow | --idempotency-key | --replay-of | --limit | --after | --idle-timeout | --cwd)
        return ;; # a value of the user's
    esac
    if [[ $cur == -* ]]; then
        # shellcheck disable=SC2086 # "sandbox exec" is two words
        COMPREPLY=($(compgen -W "$(_ephemeral_flags "$prog" $cmd)" -- "$cur"))
    elif [ "$cmd" = "sandbox cp" ]; then
        COMPREPLY=($(compgen -f -- "$cur"))
    elif [ "$cmd" = run ] || [ "$cmd" = help ]; then
        [ "$cmd" = help ] && COMPREPLY=($(compgen -W "run get list watch replay transcript outputs cancel balance" -- "$cur")) ||
            COMPREPLY=($(compgen -f -- "$cur"))
    fi
}

_ephemerald() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    local prog=${COMP_WORDS[0]}
    COMPREPLY=()
    case $COMP_CWORD in
    1) COMPREPLY=($(compgen -W "serve admin sandbox image help --help --version" -- "$cur")); return ;;
    2)
        case ${COMP_WORDS[1]} in
        admin) COMPREPLY=($(compgen -W "init key credit connection" -- "$cur")); return ;;
        sandbox) COMPREPLY=($(compgen -W "run" -- "$cur")); return ;;
        image) COMPREPLY=($(compgen -W "build" -- "$cur")); return ;;
        esac
        ;;
    3)
        case "${COMP_WORDS[1]} ${COMP_WORDS[2]}" in
        "admin key") COMPREPLY=($(compgen -W "create" -- "$cur")); return ;;
        "admin connection") COMPREPLY=($(compgen -W "add" -- "$cur")); return ;;
        esac
        ;;
    esac
    case $prev in
    --config | --file | --image | --dir) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --sandbox | --backend) COMPREPLY=($(compgen -W "auto namespaces gvisor microvm" -- "$cur")); return ;;
    --log-format) COMPREPLY=($(compgen -W "text json" -- "$cur")); return ;;
    --log-level) COMPREPLY=($(compgen -W "debug info warn error" -- "$cur")); return ;;
    --role) COMPREPLY=($(compgen -W "admin member" -- "$cur")); return ;;
    esac
    if [[ $cur == -* ]]; then
        # The command's words (not its flags) select its --help.
        local words=() w
        for w in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
            [[ $w == -* ]] && break
            words+=("$w")
        done
        COMPREPLY=($(compgen -W "$(_ephemeral_flags "$prog" "${words[@]}")" -- "$cur"))
    fi
}

complete -F _ephemeral ephemeral
complete -F _ephemerald ephemerald
