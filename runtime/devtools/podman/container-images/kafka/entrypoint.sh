#!/bin/bash
# The apache/kafka image's contract, as far as eoskit uses it: with no
# KAFKA_* setting, one KRaft node (broker and controller) on 9092 advertised
# as localhost:9092; each KAFKA_FOO_BAR=v sets foo.bar=v in server.properties
# ("__" stands for "_" and "___" for "-"); CLUSTER_ID; KAFKA_HEAP_OPTS.
set -euo pipefail
config=/opt/kafka/config/server.properties
declare -A props=(
    [node.id]=1
    [process.roles]=broker,controller
    [listeners]=PLAINTEXT://:9092,CONTROLLER://:9093
    [advertised.listeners]=PLAINTEXT://localhost:9092
    [controller.listener.names]=CONTROLLER
    [listener.security.protocol.map]=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
    [controller.quorum.voters]=1@localhost:9093
    [log.dirs]=/tmp/kraft-combined-logs
    [offsets.topic.replication.factor]=1
    [transaction.state.log.replication.factor]=1
    [transaction.state.log.min.isr]=1
    [share.coordinator.state.topic.replication.factor]=1
    [share.coordinator.state.topic.min.isr]=1
)
skip=" KAFKA_HEAP_OPTS KAFKA_OPTS KAFKA_JVM_PERFORMANCE_OPTS KAFKA_LOG4J_OPTS KAFKA_GC_LOG_OPTS KAFKA_JMX_OPTS "
while IFS='=' read -r name value; do
    case "$skip" in *" $name "*) continue ;; esac
    key=$(printf '%s' "${name#KAFKA_}" | tr 'A-Z' 'a-z' | sed -e 's/___/-/g' -e 's/__/\x01/g' -e 's/_/./g' -e 's/\x01/_/g')
    props[$key]=$value
done < <(env | grep -E '^KAFKA_[A-Z0-9_]+=' || true)
: > "$config"
for key in "${!props[@]}"; do printf '%s=%s\n' "$key" "${props[$key]}" >> "$config"; done
java=(java -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.xml -cp '/opt/kafka/libs/*')
log_dir=${props[log.dirs]%%,*}
if [ ! -f "$log_dir/meta.properties" ]; then
    "${java[@]}" -Xmx256m kafka.tools.StorageTool format --ignore-formatted \
        --cluster-id "${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}" --config "$config"
fi
exec "${java[@]}" ${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m} ${KAFKA_OPTS:-} kafka.Kafka "$config"
