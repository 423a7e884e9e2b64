import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.server.config.DynamicBrokerConfig;
import org.apache.kafka.server.config.ServerTopicConfigSynonyms;
import org.apache.kafka.storage.internals.log.LogConfig;

/**
 * Prints Kafka's own topic and broker config definitions as JSON (tools/kafka_configs.py keeps
 * broker/kafka_configs.json from it; tests/unit/test_kafka_configs.py checks the table against it).
 * Topic configs: LogConfig.configDefCopy(); broker configs: KafkaConfig.configDef(); which broker
 * configs can change at run time: DynamicBrokerConfig.ALL_DYNAMIC_CONFIGS (what DescribeConfigs calls not
 * read-only), each with its mode from DynamicBrokerConfig.dynamicConfigUpdateModes(); the security configs
 * that change only per listener: DynamicBrokerConfig.DYNAMIC_SECURITY_CONFIGS.
 */
public class ConfigDump {
    public static void main(String[] args) {
        StringBuilder out = new StringBuilder("{\n\"topic\": ");
        keys(out, LogConfig.configDefCopy().configKeys());
        out.append(",\n\"broker\": ");
        keys(out, kafka.server.KafkaConfig.configDef().configKeys());
        out.append(",\n\"topic_synonyms\": {");
        List<String> items = new ArrayList<>();
        for (Map.Entry<String, String> e : new TreeMap<>(ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS).entrySet())
            items.add(str(e.getKey()) + ": " + str(e.getValue()));
        out.append(String.join(", ", items)).append("},\n\"dynamic\": {");
        items.clear();
        Map<String, String> modes = DynamicBrokerConfig.dynamicConfigUpdateModes();
        for (String name : new TreeSet<>(DynamicBrokerConfig.ALL_DYNAMIC_CONFIGS))
            items.add(str(name) + ": " + str(modes.getOrDefault(name, "per-broker")));
        out.append(String.join(", ", items)).append("},\n\"dynamic_security\": [");
        items.clear();
        for (String name : new TreeSet<>(DynamicBrokerConfig.DYNAMIC_SECURITY_CONFIGS))
            items.add(str(name));
        out.append(String.join(", ", items)).append("]\n}\n");
        System.out.print(out);
    }

    static void keys(StringBuilder out, Map<String, ConfigDef.ConfigKey> keys) {
        out.append("[\n");
        List<String> rows = new ArrayList<>();
        for (String name : new TreeSet<>(keys.keySet())) {
            ConfigDef.ConfigKey k = keys.get(name);
            String def = k.hasDefault() && k.defaultValue != null
                ? str(ConfigDef.convertToString(k.defaultValue, k.type)) : "null";
            rows.add("  {\"name\": " + str(name) + ", \"type\": " + str(k.type.name())
                + ", \"default\": " + (k.hasDefault() ? def : "\"<none>\"")
                + ", \"validator\": " + (k.validator == null ? "null" : str(k.validator.toString()))
                + ", \"importance\": " + str(k.importance == null ? null : k.importance.name())
                + ", \"internal\": " + k.internalConfig + "}");
        }
        out.append(String.join(",\n", rows)).append("\n]");
    }

    static String str(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }
}
