# Sourced by the set-up scripts. need_disk FOLDER GB: exit 1 with one line when the disk that
# will hold FOLDER has less than GB gigabytes free. pip, short of space, fails part-way with
# "No space left on device" and leaves a half-made environment; this says so before it starts.
need_disk() {
    local folder=$1 need=$2 free
    free=$(df --output=avail -BG "$(dirname "$folder")" | tail -1 | tr -dc '0-9')
    if [ "$free" -lt "$need" ]; then
        echo "$0: $folder needs about $need GB free, $(df --output=target "$(dirname "$folder")" | tail -1) has $free GB; free some space and run it again" >&2
        exit 1
    fi
}
